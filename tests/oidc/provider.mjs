// A real OpenID provider for the tests: the certified `oidc-provider` package, on 127.0.0.1.
//
//   node provider.mjs PORT KEY_ID
//
// Signs with a fresh RSA key named KEY_ID (start it again with another id to rotate the key).
// Clients, for the client-credentials grant with a resource indicator (so the access token is a
// JWT for that audience):
//   agent / agent-secret   tokens for 10 minutes, with the scopes asked for
//   short / short-secret   tokens for 1 second (to see one expire)
//   ops / ops-secret       as agent (a user named like a token of the token file)
//   console (public)       the authorization-code flow with PKCE, redirecting to any URL given
//                          in CONSOLE_REDIRECT (comma-separated)
// Prints `listening on http://127.0.0.1:PORT` once it serves.
import Provider from "oidc-provider";
import { generateKeyPair, exportJWK } from "jose";

const [port, keyId] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = await generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: keyId, alg: "RS256", use: "sig" };
// Cordon's scopes, as the provider grants them: `cordon:` and the scope's name.
const cordonScopes = ["sessions", "sessions:all", "approve", "approve:own", "audit", "audit:all", "admin", "metrics"]
  .map((s) => `cordon:${s}`).join(" ");
const redirects = (process.env.CONSOLE_REDIRECT || "http://127.0.0.1/").split(",");

const provider = new Provider(issuer, {
  clients: [
    { client_id: "agent", client_secret: "agent-secret", grant_types: ["client_credentials"], redirect_uris: [], response_types: [], scope: `admin ${cordonScopes}` },
    { client_id: "short", client_secret: "short-secret", grant_types: ["client_credentials"], redirect_uris: [], response_types: [], scope: cordonScopes },
    { client_id: "ops", client_secret: "ops-secret", grant_types: ["client_credentials"], redirect_uris: [], response_types: [], scope: cordonScopes },
    { client_id: "console", token_endpoint_auth_method: "none", grant_types: ["authorization_code"], redirect_uris: redirects, response_types: ["code"], scope: `openid ${cordonScopes}` },
  ],
  jwks: { keys: [jwk] },
  // `admin` as well, as an organisation's own scope or group that is not Cordon's.
  scopes: ["openid", "admin", ...cordonScopes.split(" ")],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => ({
        scope: `admin ${cordonScopes}`,
        audience: resource,
        accessTokenTTL: client.clientId === "short" ? 1 : 600,
        accessTokenFormat: "jwt",
        jwt: { sign: { alg: "RS256" } },
      }),
    },
  },
  // Any login name is accepted; the console's user confirms what it asks for (its defaults).
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
});
provider.listen(Number(port), "127.0.0.1", () => console.log(`listening on ${issuer}`));
