// A City database in --geoip-dir: a host page names the host's city, as the API does, and a
// city name is shown as text (the database is the user's file; its strings are escaped like
// the wire's). The database is written here with MaxMind's writer (scripts/make-city-mmdb.pl):
// every public IPv4 address in one city whose name holds markup.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { after, test } from 'node:test';
import { ROOT, login, pageFetch, screenshot, tmpdir, useSondeAndBrowser, waitFor } from './lib.js';

const CITY = '<img src=x onerror=alert(1)>Zürich';
const db = tmpdir('sonde-city-');
after(() => db.remove());
execFileSync(path.join(ROOT, 'scripts', 'make-city-mmdb.pl'), [path.join(db.dir, 'GeoLite2-City.mmdb')], {
  input: `0.0.0.0/1\tCH\t${CITY}\n128.0.0.0/1\tCH\t${CITY}\n`,
});

const env = useSondeAndBrowser(path.join(ROOT, 'samples', 'demo.pcap'), ['--geoip-dir', db.dir]);

test("a host page names the host's city, as text", { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.message()}`);
    d.dismiss();
  });
  await page.goto(`${env.sonde.url}/#/hosts`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  const host = await waitFor(
    async () => ((await pageFetch(page, '/api/v1/hosts?limit=1000')).body?.hosts ?? []).find((h) => h.city),
    { timeout: 60_000, what: 'a live host with a city' },
  );
  assert.equal(host.city, CITY);
  await page.goto(`${env.sonde.url}/#/host/${host.ip}`);
  const dd = page.locator('dd[data-geo="city"]');
  await dd.waitFor();
  assert.equal(await dd.textContent(), CITY);
  assert.equal(await dd.locator('img').count(), 0, 'the name became markup');
  await screenshot(page, 'geo-city');
  assert.deepEqual(problems, []);
});
