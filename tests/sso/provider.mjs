// The OpenID Provider of herder's single sign-on tests: panva's certified oidc-provider, configured from
// the JSON file named by its one argument, serving one issuer per entry of `issuers` on loopback.
//
// Every issuer has the same clients, users and signing keys, so that a token of one is refused by the
// others for its issuer alone. Users sign in on the provider's own development pages (any password);
// their claims (email, groups...) come from `users`, keyed by login name. The device flow, token
// revocation and RP-initiated logout are on; refresh tokens are issued to every client allowed them.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const { default: Provider } = await import(config.module);

function claimsOf(login) {
  const user = config.users[login] ?? {};
  return { sub: user.sub ?? login, ...user };
}

for (const issuer of config.issuers) {
  const provider = new Provider(issuer.url, {
    clients: config.clients,
    jwks: { keys: config.keys },
    cookies: { keys: [config.cookieKey] },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name'],
      groups: ['groups'],
      roles: ['roles'],
    },
    scopes: ['openid', 'offline_access', 'email', 'profile', 'groups', 'roles'],
    // The claims of the scopes asked for go into the ID token, as the usual providers put them there.
    conformIdTokenClaims: false,
    async findAccount(_ctx, id) {
      return { accountId: id, async claims() { return claimsOf(id); } };
    },
    async issueRefreshToken(_ctx, client) {
      return client.grantTypeAllowed('refresh_token');
    },
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
      rpInitiatedLogout: { enabled: true },
    },
    ttl: { IdToken: config.idTokenTtl ?? 3600, AccessToken: 3600, DeviceCode: 600 },
  });
  provider.proxy = false;
  const server = issuer.tls
    ? https.createServer({ key: issuer.tls.key, cert: issuer.tls.cert }, provider.callback())
    : http.createServer(provider.callback());
  server.listen(issuer.port, '127.0.0.1', () => console.log(`listening ${issuer.url}`));
}

process.on('SIGTERM', () => process.exit(0));
