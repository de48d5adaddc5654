//! Entry points for the fuzz targets in `tests/fuzz`: what clients send `cordon serve`, read
//! by the code that reads it. Built only with the `fuzzing` feature.

/// The API's request bodies and query strings.
pub fn api_requests(data: &[u8]) {
    crate::api::read_requests(data);
}

/// The gateway's Chat Completions and Responses request bodies.
pub fn gateway_requests(data: &[u8]) {
    crate::gateway::read_requests(data);
}

/// The token file: every token it accepts is one of its lines, and checks as itself.
pub fn token_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tokens) = crate::Tokens::parse(text, std::path::Path::new("tokens")) {
        for line in text.lines() {
            let token = line.split_whitespace().last().unwrap_or_default();
            let _ = tokens.check(token);
        }
    }
}
