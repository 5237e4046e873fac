// Logins: a wrong password is refused, login and logout work (after logout the API answers 401
// and the login page shows), and roles: a viewer has no Users page and gets 403 from the admin
// API, while an admin manages users from the console.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { addUser, CORPUS, login, pageFetch, screenshot, startBrowser, startSonde, tmpdir, waitFor } from './lib.js';

const CAPTURE = path.join(CORPUS, 'telegram.pcap');

let sonde, b, tmp;
before(async () => {
  tmp = tmpdir();
  const users = path.join(tmp.dir, 'users');
  // Users made with the CLI before the start (so no admin password is generated).
  addUser(users, 'alice', 'admin', 'alice-password-1');
  addUser(users, 'victor', 'viewer', 'victor-password-1');
  sonde = await startSonde({ capture: CAPTURE, usersFile: users });
  b = await startBrowser();
});
after(async () => {
  await b?.browser.close();
  await sonde?.stop();
  tmp?.remove();
});

test('the API needs a login', async () => {
  const r = await fetch(`${sonde.url}/api/v1/hosts`);
  assert.equal(r.status, 401);
  assert.equal(typeof (await r.json()).error, 'string');
  // The console's page itself loads, under a CSP that allows no inline script.
  const index = await fetch(`${sonde.url}/`);
  assert.equal(index.status, 200);
  const csp = index.headers.get('content-security-policy') ?? '';
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.doesNotMatch(await index.text(), /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script in index.html');
});

test('login with a wrong password is refused; login and logout work', { timeout: 90_000 }, async () => {
  const { page, problems } = b;
  await page.goto(`${sonde.url}/`);
  await page.getByLabel('User', { exact: true }).fill('alice');
  await page.getByLabel('Password', { exact: true }).fill('not-her-password');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('#login-error:has-text("Wrong user name or password")').waitFor();
  assert.equal((await pageFetch(page, '/api/v1/me')).status, 401, 'still logged out');
  await screenshot(page, 'login-refused');

  await page.getByLabel('Password', { exact: true }).fill('alice-password-1');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('#nav a[data-view="dashboard"]').waitFor();
  assert.equal(await page.locator('.me .user').textContent(), 'alice');
  assert.equal(await page.locator('.me .role').textContent(), 'admin');
  assert.equal((await pageFetch(page, '/api/v1/hosts')).status, 200);
  // The session cookie is out of the page's reach.
  assert.equal(await page.evaluate(() => document.cookie), '');

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.locator('form.login').waitFor();
  assert.equal((await pageFetch(page, '/api/v1/hosts')).status, 401, 'the API refuses after logout');
  assert.equal(await page.locator('#nav a').count(), 0, 'no navigation when logged out');
  // A reload still shows the login page.
  await page.reload();
  await page.locator('form.login').waitFor();
  await screenshot(page, 'logged-out');
  assert.deepEqual(problems, []);
});

test('a viewer cannot reach the admin pages; an admin can', { timeout: 120_000 }, async () => {
  const { page } = b;
  await login(page, sonde.url, 'alice', 'alice-password-1');
  // The admin sees Users, lists them, adds one, and creates a token shown once.
  await page.locator('#nav a[data-view="users"]').click();
  await page.locator('table.data tbody th', { hasText: 'victor' }).waitFor();
  assert.equal((await pageFetch(page, '/api/v1/admin/users')).status, 200);
  await page.locator('#new-user-name').fill('vera');
  await page.locator('#new-user-password').fill('vera-password-1');
  await page.locator('#new-user-role').selectOption('viewer');
  await page.getByRole('button', { name: 'Add user' }).click();
  await page.locator('table.data tbody th', { hasText: 'vera' }).waitFor();
  await page.locator('#new-token-name').fill('grafana');
  await page.getByRole('button', { name: 'Create token' }).click();
  const token = await page.locator('#new-token').textContent();
  assert.match(token, /\S{20,}/);
  const viaToken = await fetch(`${sonde.url}/api/v1/hosts`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(viaToken.status, 200, 'the new token works');
  // Deleting asks for confirmation.
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete user vera' }).click();
  await waitFor(async () => (await page.locator('table.data tbody th', { hasText: 'vera' }).count()) === 0, { what: 'vera deleted' });
  await screenshot(page, 'users-admin');
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.locator('form.login').waitFor();

  // The viewer: no Users link, the page refuses, and the API answers 403.
  await login(page, sonde.url, 'victor', 'victor-password-1');
  assert.equal(await page.locator('.me .role').textContent(), 'viewer');
  assert.equal(await page.locator('#nav a[data-view="users"]').count(), 0, 'no Users page for a viewer');
  assert.ok((await page.locator('#nav a').count()) >= 5);
  const r = await pageFetch(page, '/api/v1/admin/users');
  assert.equal(r.status, 403);
  const post = await page.evaluate(async () => {
    const r = await fetch('/api/v1/admin/users', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'mallory', role: 'admin', password: 'x-password-1' }) });
    return r.status;
  });
  assert.equal(post, 403);
  await page.goto(`${sonde.url}/#/users`);
  await page.locator('text=This page needs the admin role.').waitFor();
  assert.equal(await page.locator('#new-user-name').count(), 0);
  await screenshot(page, 'users-viewer');
});
