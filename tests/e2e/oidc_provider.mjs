// A certified OpenID provider (panva's oidc-provider, the library behind many production
// providers) run by the tests on 127.0.0.1, with its development sign-in pages: any login name
// signs in as the account of that name, whose groups come from `accounts`. PKCE is required,
// the client authenticates with client_secret_basic, and the device authorization grant is on
// (for `purser login --oidc`).
//
//   const idp = await startOidcProvider({ redirectUri, accounts: { dana: { groups: ['ml'] } } });
//   ... idp.issuer, idp.clientId, idp.clientSecret ...
//   await idp.close();
//
// Run alone (node tests/e2e/oidc_provider.mjs REDIRECT_URI) it prints its issuer and waits.
import Provider from 'oidc-provider';
import { once } from 'node:events';
import { createServer } from 'node:http';

export async function startOidcProvider({
  redirectUri,
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
  server.on('request', provider.callback());
  return {
    issuer,
    clientId,
    clientSecret,
    provider,
    close: async () => {
      server.closeAllConnections?.();
      server.close();
      await once(server, 'close').catch(() => {});
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const idp = await startOidcProvider({
    // Only text the provider compares redirects against, never bound: the provider itself
    // listens on port 0 (above) and prints the port it got.
    redirectUri: process.argv[2] ?? 'http://127.0.0.1:8080/auth/oidc/callback',
    accounts: { dana: { groups: ['ml-team'] }, ops: { groups: ['platform'] } },
  });
  console.log(`oidc provider: listening on ${idp.issuer}`);
}
