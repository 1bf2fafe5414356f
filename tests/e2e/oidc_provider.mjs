// A certified OpenID provider (panva's oidc-provider, the library behind many production
// providers) run by the tests on 127.0.0.1, with its development sign-in pages: any login name
// signs in as the account of that name, whose groups come from `accounts` (read at each sign-in,
// so a test may move someone between groups). PKCE is required, the client authenticates with
// client_secret_basic, and the device authorization grant is on (for `purser login --oidc`).
//
// The client is registered as a native application with a loopback redirect URI, which the
// provider matches on any port (RFC 8252 section 7.3): Purser, started after it on port 0,
// builds its callback URL from the request's Host (oidc.redirect_url: /auth/oidc/callback).
//
//   const idp = await startOidcProvider({ accounts: { dana: { groups: ['ml'] } } });
//   ... idp.issuer, idp.clientId, idp.clientSecret ...
//   await idp.close();
//
// Run alone (node tests/e2e/oidc_provider.mjs REDIRECT_URI) it prints its issuer and waits.
import Provider from 'oidc-provider';
import { once } from 'node:events';
import { createServer } from 'node:http';

export async function startOidcProvider({
  redirectUri = 'http://127.0.0.1/auth/oidc/callback',
  accounts = {},
  clientId = 'purser',
  clientSecret = 'purser-e2e-client-secret-0123456789',
} = {}) {
  // The port first: the issuer names it, and the provider is made for its issuer.
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        application_type: 'native',
        redirect_uris: [redirectUri],
        response_types: ['code'],
        grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    scopes: ['openid', 'profile', 'email', 'groups'],
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email'],
      groups: ['groups'],
    },
    findAccount: async (ctx, id) => ({
      accountId: id,
      async claims() {
        const account = accounts[id] ?? {};
        return {
          sub: id,
          preferred_username: id,
          name: account.name ?? id,
          email: account.email ?? `${id}@example.com`,
          groups: account.groups ?? [],
        };
      },
    }),
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      rpInitiatedLogout: { enabled: true },
    },
    pkce: { required: () => true },
    ttl: { AccessToken: 600, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
    cookies: { keys: ['purser-e2e-cookie-key-0123456789abcdef'] },
  });
  // `tamper.idToken = true`: the token endpoint's ID tokens are altered on the way out (their
  // subject changed, the signature kept), as a party between Purser and the provider would.
  const tamper = { idToken: false };
  const handle = provider.callback();
  server.on('request', (req, res) => {
    if (tamper.idToken && req.method === 'POST' && req.url.startsWith('/token')) {
      const end = res.end.bind(res);
      res.end = (chunk, ...rest) => {
        try {
          const body = JSON.parse(chunk.toString());
          if (body.id_token) {
            const [header, payload, signature] = body.id_token.split('.');
            const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
            claims.sub = `${claims.sub}-impostor`;
            const forged = Buffer.from(JSON.stringify(claims)).toString('base64url');
            body.id_token = [header, forged, signature].join('.');
            chunk = JSON.stringify(body);
            res.setHeader('content-length', Buffer.byteLength(chunk));
          }
        } catch {
          // Not JSON: passed on as it is.
        }
        return end(chunk, ...rest);
      };
    }
    handle(req, res);
  });
  return {
    issuer,
    clientId,
    clientSecret,
    provider,
    tamper,
    close: async () => {
      server.closeAllConnections?.();
      server.close();
      await once(server, 'close').catch(() => {});
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const idp = await startOidcProvider({
    // Compared with the port left out (a loopback redirect of a native client), never bound.
    redirectUri: process.argv[2],
    accounts: { dana: { groups: ['ml-team'] }, ops: { groups: ['platform'] } },
  });
  console.log(`oidc provider: listening on ${idp.issuer}`);
}
