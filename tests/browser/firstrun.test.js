// The first run, as `make run` starts it: the bundled demo capture replayed with --replay loop
// and history on disk. Within a minute the console is alive: the dashboard chart opens with the
// last minutes already drawn (from the series on disk) and keeps moving, its time labels are
// clock times inside the data's range, several applications are listed, the History page has
// flows, and a host's chart opens with its past too.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { login, ROOT, screenshot, startBrowser, startSonde, tmpdir, waitFor } from './lib.js';

const DEMO = path.join(ROOT, 'samples', 'demo.pcap');
const GEOIP = path.join(ROOT, 'geoip', 'node_modules', '@ip-location-db');
if (!existsSync(path.join(GEOIP, 'asn'))) throw new Error(`${GEOIP} is missing: run make geoip`);
let sonde, b, tmp, started;

before(async () => {
  tmp = tmpdir();
  started = Date.now() / 1000;
  sonde = await startSonde({
    capture: DEMO,
    usersFile: path.join(tmp.dir, 'users'),
    realtime: false,
    args: ['--replay', 'loop', '--data-dir', path.join(tmp.dir, 'data'), '--geoip-dir', GEOIP,
      '--local-networks', '10.0.0.0/8,fd00::/8'],
  });
  b = await startBrowser();
});

after(async () => {
  await b?.browser.close();
  await sonde?.stop();
  tmp?.remove();
});

/** The chart's points, its newest point's time and its time axis labels ([unix seconds, text] pairs). */
const chartState = (page, sel = '.chart') =>
  page.evaluate((sel) => {
    const f = document.querySelector(sel);
    return { points: Number(f?.dataset.points ?? 0), newest: Number(f?.dataset.newest ?? 0), labels: JSON.parse(f?.dataset.xLabels ?? '[]') };
  }, sel);

/** "14:05:30" for a Unix second, in the browser's local time (as the console writes it). */
const clock = (page, t) =>
  page.evaluate((t) => {
    const d = new Date(t * 1000);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
  }, t);

test('the first run is alive within a minute', { timeout: 150_000 }, async () => {
  const { page, problems } = b;
  await page.goto(`${sonde.url}/#/dashboard`);
  await login(page, sonde.url, 'admin', sonde.adminPassword);
  // Let the loop run a while, then open the dashboard afresh: the chart has its past at once.
  await page.waitForTimeout(Math.max(0, (started + 25 - Date.now() / 1000) * 1000));
  await page.goto(`${sonde.url}/#/dashboard`);
  await page.reload();
  await waitFor(async () => (await chartState(page)).points >= 15, { timeout: 3000, what: 'the last seconds drawn on opening' });
  const opened = await chartState(page);
  await page.waitForTimeout(2500);
  const later = await chartState(page);
  assert.ok(later.labels.length >= 2, `time labels: ${JSON.stringify(later.labels)}`);
  const now = Date.now() / 1000;
  for (const [t, text] of later.labels) {
    assert.ok(t >= started - 130 && t <= now + 5, `a label at ${t} outside the data's range (${started}..${now})`);
    assert.equal(text, await clock(page, t), `the label of ${t}`);
  }
  assert.ok(later.newest >= opened.newest + 2, `the chart moves: newest point at ${opened.newest} then ${later.newest}`);
  const apps = await page.locator('.card:has(h2:text("Top applications")) tbody th').allTextContents();
  assert.ok(apps.length >= 5, `applications on the dashboard: ${apps}`);
  // The outside servers are placed (make run fetches the free databases): countries and ASes.
  const places = page.locator('div[data-card="places"]');
  const countries = await waitFor(
    async () => {
      const c = await places.locator('a[data-country]').evaluateAll((a) => a.map((e) => e.dataset.country));
      return c.length >= 5 ? c : null;
    },
    { timeout: 20_000, what: 'five countries or more on the dashboard' },
  );
  assert.ok(countries.every((c) => /^[A-Z]{2}$/.test(c)), countries.join());
  assert.ok((await places.locator('a[data-asn]').count()) >= 5, 'five ASes or more on the dashboard');
  await screenshot(page, 'firstrun-dashboard');

  // History: flows of this run, in the last hour, without choosing anything.
  await page.goto(`${sonde.url}/#/history`);
  await waitFor(
    async () => {
      await page.reload();
      await page.locator('main table tbody tr').first().waitFor();
      return (await page.locator('main table tbody tr:not(.empty)').count()) > 0;
    },
    { timeout: 60_000, every: 3000, what: 'flows on the History page' },
  );
  await screenshot(page, 'firstrun-history');

  // A server's page: its chart opens with its past too, and the long-range card has a month.
  await page.goto(`${sonde.url}/#/host/10.0.0.2`);
  await waitFor(async () => (await chartState(page, '.card.wide .chart')).points >= 5, { timeout: 3000, what: "the host's last minutes drawn on opening" });
  await page.locator('button[data-range="30 d"]').waitFor();
  await screenshot(page, 'firstrun-host');
  assert.deepEqual(problems, []);
});
