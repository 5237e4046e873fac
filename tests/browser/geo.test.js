// --geoip-dir in the console: the dashboard's Top countries and Top ASes cards list what the
// API's top lists say; the hosts table shows each host's country and AS, and a country link
// keeps only the hosts placed there (as the API's ?country= filter does); a host page says
// where the host is. The databases are the free ones of `make geoip`.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { CORPUS, ROOT, login, pageFetch, screenshot, useSondeAndBrowser, waitFor } from './lib.js';

const CAPTURE = path.join(CORPUS, 'android.pcap');
const GEOIP = path.join(ROOT, 'geoip', 'node_modules', '@ip-location-db');
if (!existsSync(path.join(GEOIP, 'asn'))) throw new Error(`${GEOIP} is missing: run make geoip`);

const env = useSondeAndBrowser(CAPTURE, ['--geoip-dir', GEOIP]);

test('the dashboard ranks countries and ASes as the API does', { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/dashboard`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  const cards = page.locator('div[data-card="places"]');
  await cards.waitFor();
  // Once located hosts are live, the cards show the API's rows in its order.
  const shown = await waitFor(
    async () => {
      const api = (await pageFetch(page, '/api/v1/top/countries?n=10')).body;
      const codes = await cards.locator('a[data-country]').evaluateAll((a) => a.map((e) => e.dataset.country));
      const want = (api?.rows ?? []).map((r) => r.country);
      return want.length >= 2 && JSON.stringify(codes) === JSON.stringify(want) ? codes : null;
    },
    { timeout: 60_000, what: 'two countries or more, as the API lists them' },
  );
  assert.ok(shown.every((c) => /^[A-Z]{2}$/.test(c)), shown.join());
  const asns = await waitFor(
    async () => {
      const api = (await pageFetch(page, '/api/v1/top/asns?n=10')).body;
      const got = await cards.locator('a[data-asn]').evaluateAll((a) => a.map((e) => Number(e.dataset.asn)));
      const want = (api?.rows ?? []).map((r) => r.asn);
      return want.length >= 2 && JSON.stringify(got) === JSON.stringify(want) ? api.rows : null;
    },
    { timeout: 30_000, what: 'the ASes the API lists' },
  );
  // The AS names are the databases', shown as text.
  const firstAs = await cards.locator('a[data-asn]').first().textContent();
  assert.equal(firstAs, `AS${asns[0].asn}${asns[0].name ? ` ${asns[0].name}` : ''}`);
  assert.match(await cards.textContent(), /Not located: \d+ hosts/);
  await screenshot(page, 'geo-dashboard');
  assert.deepEqual(problems, []);
});

test('hosts show their country and AS; a country link filters the hosts', { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/hosts`);
  const top = (await pageFetch(page, '/api/v1/top/countries?n=1')).body.rows[0].country;
  const rows = () =>
    page.evaluate(() =>
      [...document.querySelectorAll('tbody tr')]
        .filter((tr) => tr.querySelector('a.ip'))
        .map((tr) => ({ ip: tr.querySelector('a.ip').textContent, country: tr.querySelector('a[data-country]')?.dataset.country ?? null })),
    );
  // Every row's country is the API's for that host.
  const api = new Map(((await pageFetch(page, '/api/v1/hosts?limit=50')).body.hosts ?? []).map((h) => [h.ip, h.country]));
  const before = await waitFor(async () => ((await rows()).length > 0 ? rows() : null), { what: 'hosts' });
  for (const r of before) if (api.has(r.ip)) assert.equal(r.country, api.get(r.ip), r.ip);
  await page.locator(`tbody a[data-country="${top}"]`).first().click();
  await waitFor(() => page.evaluate((c) => location.hash.includes(`country=${c}`), top), { what: `country=${top} in the URL` });
  const placed = (await pageFetch(page, `/api/v1/hosts?limit=1000&country=${top}`)).body.hosts.map((h) => h.ip).sort();
  const shown = await waitFor(
    async () => {
      const r = await rows();
      return r.length === placed.length && r.every((h) => h.country === top) ? r : null;
    },
    { what: `only the ${placed.length} hosts in ${top}` },
  );
  assert.deepEqual(shown.map((h) => h.ip).sort(), placed);
  assert.equal(await page.getByLabel('Country').inputValue(), top);
  await screenshot(page, 'geo-hosts');

  // The host page says where the host is.
  await page.goto(`${env.sonde.url}/#/host/${shown[0].ip}`);
  const where = page.locator('dd[data-geo="country"] a[data-country]').first();
  await where.waitFor();
  assert.equal(await where.getAttribute('data-country'), top);
  assert.match(await page.locator('dd[data-geo="asn"]').first().textContent(), /^AS\d+/);
  assert.deepEqual(problems, []);
});
