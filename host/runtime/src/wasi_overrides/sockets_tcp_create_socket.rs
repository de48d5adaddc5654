//! A per-call cap on the TCP sockets a plugin holds.
//!
//! Every socket is a file descriptor of the host process, and wasmtime-wasi sets no bound: a
//! plugin granted one TCP address could connect (and never close) until the process ran out
//! of descriptors, and every other call, and the host itself, would fail to open anything for
//! the rest of its time limit. Cordon links `create-tcp-socket` over wasmtime-wasi's: the
//! socket is still wasmtime-wasi's (the grant is checked when it binds or connects), but a
//! call already holding [`MAX_TCP_SOCKETS_PER_CALL`] sockets gets `new-socket-limit` until it
//! drops one. HTTP requests have their own cap (`http_policy`); listening is never granted,
//! so no socket arrives by `accept`.
//!
//! A socket counts while its resource is in the call's table. Its streams are the socket's
//! children there, so the socket cannot be dropped before them: a connection counts as long
//! as anything of it is still in the guest's hands.
//!
//! A call gets sockets whatever its TCP grants: an address that is not granted is refused, and
//! noted with the grant that would allow it, by the check the sandbox gives wasmtime-wasi when
//! the socket binds or connects. Should wasmtime-wasi refuse the socket itself
//! (`access-denied`), that is noted here, where it is answered.

use wasmtime::StoreContextMut;
use wasmtime::component::Linker;
use wasmtime_wasi::p2::TcpSocket;
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, Host as _, IpAddressFamily};
use wasmtime_wasi::p2::bindings::sockets::tcp_create_socket::Host as _;
use wasmtime_wasi::sockets::WasiSocketsView;

use crate::caps::MAX_TCP_SOCKETS_PER_CALL;
use crate::live_handles::Created;
use crate::wasi_overrides::{OverrideParts, OverrideView, WASI_SOCKETS_TCP_CREATE_SOCKET};

/// The sockets a call created.
#[derive(Default)]
pub(crate) struct TcpSockets {
    created: Created<TcpSocket>,
    /// Whether the host log already says this call hit the cap (once per call).
    warned: bool,
}

/// Whether the call may create another socket.
fn has_room(parts: &mut OverrideParts<'_>) -> bool {
    parts
        .net
        .tcp_sockets
        .created
        .has_room(parts.table, MAX_TCP_SOCKETS_PER_CALL)
}

/// Replaces wasmtime-wasi's `create-tcp-socket` in `linker`; shadowing must be allowed by the
/// caller.
pub(crate) fn shadow<T: OverrideView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let mut create = linker.instance(WASI_SOCKETS_TCP_CREATE_SOCKET)?;
    create.func_wrap(
        "create-tcp-socket",
        |mut store: StoreContextMut<'_, T>, (family,): (IpAddressFamily,)| {
            let state = store.data_mut();
            let mut parts = state.overrides();
            if !has_room(&mut parts) {
                if !std::mem::replace(&mut parts.net.tcp_sockets.warned, true) {
                    tracing::warn!(
                        plugin = %parts.plugin,
                        "refusing to create more TCP sockets: the call holds \
                         {MAX_TCP_SOCKETS_PER_CALL}, the most one call may hold"
                    );
                }
                return Ok((Err(ErrorCode::NewSocketLimit),));
            }
            let mut sockets = state.sockets();
            let created = match sockets.create_tcp_socket(family) {
                Ok(socket) => socket,
                Err(e) => {
                    let code = sockets.convert_error_code(e)?;
                    if matches!(code, ErrorCode::AccessDenied) {
                        state
                            .overrides()
                            .refused
                            .refuse("tcp: a socket (refused by the host)".to_string());
                    }
                    return Ok((Err(code),));
                }
            };
            state.overrides().net.tcp_sockets.created.record(&created);
            Ok((Ok(created),))
        },
    )?;
    Ok(())
}
