//! Caps on the HTTP objects a call builds in host memory.
//!
//! `wasi:http/types` is linked for every plugin (an HTTP grant is checked when a request is
//! sent), and wasmtime-wasi-http keeps whatever a guest builds in host memory, outside its
//! memory limit: a guest can fill gigabytes with request methods of 64 MiB each, bodies written
//! to requests never sent, and header maps cloned from a full one. Cordon links the
//! constructors and setters of those objects over wasmtime-wasi-http's:
//! - a call holds at most [`MAX_HTTP_MESSAGES_PER_CALL`] outgoing requests and responses, and
//!   [`MAX_HTTP_FIELDS_PER_CALL`] header maps of its own making (over that, the constructor traps:
//!   it has no error to return);
//! - a method or scheme is at most [`MAX_HTTP_TOKEN`] bytes, an authority [`MAX_HTTP_AUTHORITY`], a path
//!   with query [`MAX_HTTP_PATH_WITH_QUERY`] (over that, the setter answers its usual "invalid").
//!
//! Each header map is also bounded ([`crate::caps::MAX_HTTP_FIELDS_BYTES`]), and so is what a request or response
//! body buffers (`http_policy`), so what a call can build is bounded as a whole.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::p2::bindings::http::types::{
    Host, HostFields, HostOutgoingRequest as RequestMethods,
    HostOutgoingResponse as ResponseMethods, Method, Scheme,
};
use wasmtime_wasi_http::p2::types::{HostOutgoingRequest, HostOutgoingResponse};

use crate::caps::{
    MAX_HTTP_AUTHORITY, MAX_HTTP_FIELDS_PER_CALL, MAX_HTTP_MESSAGES_PER_CALL,
    MAX_HTTP_PATH_WITH_QUERY, MAX_HTTP_TOKEN,
};
use crate::live_handles::Created;
use crate::wasi_overrides::{OverrideParts, OverrideView, WASI_HTTP_TYPES};

/// The HTTP objects a call built.
#[derive(Default)]
pub(crate) struct HttpObjects {
    requests: Created<HostOutgoingRequest>,
    responses: Created<HostOutgoingResponse>,
    fields: Created<FieldMap>,
}

/// Fails (a trap: the constructors have no error to return) unless the call may build another
/// request or response.
fn room_for_message(parts: OverrideParts<'_>) -> wasmtime::Result<()> {
    let made = &mut parts.net.http_objects;
    let room = made.requests.recorded() + made.responses.recorded() < MAX_HTTP_MESSAGES_PER_CALL
        || made.requests.live(parts.table) + made.responses.live(parts.table)
            < MAX_HTTP_MESSAGES_PER_CALL;
    room.then_some(()).ok_or_else(|| {
        wasmtime::format_err!(
            "the call holds {MAX_HTTP_MESSAGES_PER_CALL} outgoing requests and responses, the most \
             one call may hold"
        )
    })
}

/// Fails (a trap) unless the call may build another header map.
fn room_for_fields(parts: OverrideParts<'_>) -> wasmtime::Result<()> {
    let room = parts
        .net
        .http_objects
        .fields
        .has_room(parts.table, MAX_HTTP_FIELDS_PER_CALL);
    room.then_some(()).ok_or_else(|| {
        wasmtime::format_err!(
            "the call holds {MAX_HTTP_FIELDS_PER_CALL} header maps, the most one call may hold"
        )
    })
}

/// Replaces wasmtime-wasi-http's constructors and setters named above in `linker`; shadowing
/// must be allowed by the caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut types = linker.instance(WASI_HTTP_TYPES)?;
    types.func_wrap(
        "[constructor]fields",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let state = store.data_mut();
            room_for_fields(state.overrides())?;
            let made = HostFields::new(&mut state.http())?;
            state.overrides().net.http_objects.fields.record(&made);
            Ok((made,))
        },
    )?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store: StoreContextMut<'_, T>, (entries,): (Vec<(String, Vec<u8>)>,)| {
            let state = store.data_mut();
            room_for_fields(state.overrides())?;
            let mut http = state.http();
            let made = match HostFields::from_list(&mut http, entries) {
                Ok(made) => made,
                Err(e) => return Ok((Err(http.convert_header_error(e)?),)),
            };
            state.overrides().net.http_objects.fields.record(&made);
            Ok((Ok(made),))
        },
    )?;
    types.func_wrap(
        "[method]fields.clone",
        |mut store: StoreContextMut<'_, T>, (fields,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            room_for_fields(state.overrides())?;
            let made = HostFields::clone(&mut state.http(), fields)?;
            state.overrides().net.http_objects.fields.record(&made);
            Ok((made,))
        },
    )?;
    types.func_wrap(
        "[constructor]outgoing-request",
        |mut store: StoreContextMut<'_, T>, (headers,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            room_for_message(state.overrides())?;
            let made = RequestMethods::new(&mut state.http(), headers)?;
            state.overrides().net.http_objects.requests.record(&made);
            Ok((made,))
        },
    )?;
    types.func_wrap(
        "[constructor]outgoing-response",
        |mut store: StoreContextMut<'_, T>, (headers,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            room_for_message(state.overrides())?;
            let made = ResponseMethods::new(&mut state.http(), headers)?;
            state.overrides().net.http_objects.responses.record(&made);
            Ok((made,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-method",
        |mut store: StoreContextMut<'_, T>,
         (request, method): (Resource<HostOutgoingRequest>, Method)| {
            if matches!(&method, Method::Other(name) if name.len() > MAX_HTTP_TOKEN) {
                return Ok((Err(()),));
            }
            let set = RequestMethods::set_method(&mut store.data_mut().http(), request, method)?;
            Ok((set,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-scheme",
        |mut store: StoreContextMut<'_, T>,
         (request, scheme): (Resource<HostOutgoingRequest>, Option<Scheme>)| {
            if matches!(&scheme, Some(Scheme::Other(name)) if name.len() > MAX_HTTP_TOKEN) {
                return Ok((Err(()),));
            }
            let set = RequestMethods::set_scheme(&mut store.data_mut().http(), request, scheme)?;
            Ok((set,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-authority",
        |mut store: StoreContextMut<'_, T>,
         (request, authority): (Resource<HostOutgoingRequest>, Option<String>)| {
            if authority
                .as_ref()
                .is_some_and(|a| a.len() > MAX_HTTP_AUTHORITY)
            {
                return Ok((Err(()),));
            }
            let set =
                RequestMethods::set_authority(&mut store.data_mut().http(), request, authority)?;
            Ok((set,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-path-with-query",
        |mut store: StoreContextMut<'_, T>,
         (request, path): (Resource<HostOutgoingRequest>, Option<String>)| {
            if path
                .as_ref()
                .is_some_and(|p| p.len() > MAX_HTTP_PATH_WITH_QUERY)
            {
                return Ok((Err(()),));
            }
            let set =
                RequestMethods::set_path_with_query(&mut store.data_mut().http(), request, path)?;
            Ok((set,))
        },
    )?;
    Ok(())
}
