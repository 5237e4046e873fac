// --local-networks in the console: the dashboard's Traffic by direction chart draws and its
// figures move; the hosts page's Network filter keeps only local (then remote) hosts, as the
// API says, and is in the URL; the flows table shows each flow's direction and filters by it;
// a host page says local or remote.

import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { CORPUS, login, pageFetch, screenshot, useSondeAndBrowser, waitFor } from './lib.js';

const CAPTURE = path.join(CORPUS, 'android.pcap');
const NETS = '192.168.0.0/16,fe80::/10';

const env = useSondeAndBrowser(CAPTURE, ['--local-networks', NETS]);

const isLocal = (ip) => ip.startsWith('192.168.') || ip.toLowerCase().startsWith('fe80:');

test('the dashboard charts traffic by direction', { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/dashboard`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  const card = page.locator('section[data-card="directions"]');
  await card.waitFor();
  assert.match(await card.textContent(), /192\.168\.0\.0\/16/);
  // Some out (LAN client to the internet) traffic is shown within the replay.
  await waitFor(
    async () => {
      const v = await card.locator('dd[data-direction="out"]').textContent();
      return v && v !== '–' && !/^0\b/.test(v);
    },
    { timeout: 60_000, what: 'an out rate above zero' },
  );
  assert.equal(await card.locator('canvas').count() > 0, true, 'the chart is drawn');
  // The flows table of the dashboard has a Direction column.
  await waitFor(() => page.locator('span.direction').count(), { what: 'a direction cell' });
  await screenshot(page, 'localnet-dashboard');
  assert.deepEqual(problems, []);
});

test('hosts filter local and remote; flows show and filter their direction', { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  // Logged in by the test before (same browser page).
  await page.goto(`${env.sonde.url}/#/hosts`);
  // Both kinds of host are live.
  await waitFor(
    async () => {
      const hosts = (await pageFetch(page, '/api/v1/hosts?limit=1000')).body?.hosts ?? [];
      return hosts.some((h) => h.local) && hosts.some((h) => !h.local);
    },
    { timeout: 60_000, what: 'local and remote hosts' },
  );
  const rows = () =>
    page.evaluate(() => [...document.querySelectorAll('tbody tr')].filter((tr) => tr.querySelector('a.ip')).map((tr) => ({ ip: tr.querySelector('a.ip').textContent, local: tr.querySelector('[data-local]')?.dataset.local })));
  for (const [value, want] of [
    ['true', 'true'],
    ['false', 'false'],
  ]) {
    await page.getByLabel('Network').selectOption(value);
    await waitFor(() => page.evaluate((v) => location.hash.includes(`local=${v}`), value), { what: `local=${value} in the URL` });
    const shown = await waitFor(
      async () => {
        const r = await rows();
        return r.length > 0 && r.every((h) => h.local === want) ? r : null;
      },
      { what: `only ${want === 'true' ? 'local' : 'remote'} hosts` },
    );
    for (const h of shown) assert.equal(String(isLocal(h.ip)), want, h.ip);
  }
  await screenshot(page, 'localnet-hosts');

  // A remote host's page says so.
  const remote = (await rows())[0].ip;
  await page.goto(`${env.sonde.url}/#/host/${remote}`);
  await waitFor(async () => (await page.locator('dd[data-local]').count()) > 0, { what: 'the Network figure' });
  assert.equal(await page.locator('dd[data-local]').first().textContent(), 'remote');

  await page.goto(`${env.sonde.url}/#/flows`);
  await waitFor(() => page.locator('tbody span.direction').count(), { what: 'directions in the flows table' });
  const dirs = await page.locator('tbody span.direction').evaluateAll((s) => s.map((e) => e.dataset.direction));
  assert.ok(dirs.every((d) => ['in', 'out', 'internal', 'transit'].includes(d)), dirs.join());
  await page.getByLabel('Direction').selectOption('out');
  await waitFor(() => page.evaluate(() => location.hash.includes('direction=out')), { what: 'direction=out in the URL' });
  await waitFor(
    async () => {
      const d = await page.locator('tbody span.direction').evaluateAll((s) => s.map((e) => e.dataset.direction));
      return d.length > 0 && d.every((x) => x === 'out');
    },
    { what: 'only out flows' },
  );
  await screenshot(page, 'localnet-flows');
  assert.deepEqual(problems, []);
});
