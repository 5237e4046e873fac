// The dashboard's throughput chart is live: two pictures of its canvas ~2 s apart differ.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, test } from 'node:test';
import { ARTIFACTS, CORPUS, login, screenshot, tmpdir, useSondeAndBrowser, waitFor } from './lib.js';

// 59 s of Telegram traffic with 24 hosts: packets in nearly every second.
const CAPTURE = path.join(CORPUS, 'telegram.pcap');

// A flow output, for the Interface page's outputs card.
// Egress on too: the UDP packets (1566 of them, tcpdump -r telegram.pcap udp) to a pcap ring.
const EGRESS = tmpdir('sonde-egress-');
const env = useSondeAndBrowser(CAPTURE, ['--flows-out', '/dev/null', '--egress-pcap', EGRESS.dir, '--egress-bpf', 'udp']);
after(() => EGRESS.remove());

/** The chart canvas's pixels, as a hash-free copy to compare. */
const pixels = (page) =>
  page.evaluate(() => {
    const c = document.querySelector('.chart canvas');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    return Array.from(d);
  });

test('the dashboard chart moves with the event stream', { timeout: 120_000 }, async () => {
  assert.ok(env.sonde.adminPassword, `first start prints the admin password: ${env.sonde.stderr()}`);
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/dashboard`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  // The stream is up and at least two points are drawn.
  await page.locator('.live[data-state="live"]').waitFor();
  await waitFor(() => page.evaluate(() => document.querySelectorAll('.u-legend .u-value').length > 0), { what: 'the legend' });
  const canvas = page.locator('.chart canvas').first();
  await waitFor(async () => (await page.locator('.stat dd').first().textContent()) !== '–', { what: 'a first tick' });
  await page.waitForTimeout(1500);

  const first = await pixels(page);
  await canvas.screenshot({ path: path.join(ARTIFACTS, 'dashboard-chart-1.png') });
  await page.waitForTimeout(2200);
  const second = await pixels(page);
  await canvas.screenshot({ path: path.join(ARTIFACTS, 'dashboard-chart-2.png') });
  await screenshot(page, 'dashboard');

  assert.equal(first.length, second.length, 'the canvas kept its size');
  let changed = 0;
  for (let i = 0; i < first.length; i += 4) {
    if (first[i] !== second[i] || first[i + 1] !== second[i + 1] || first[i + 2] !== second[i + 2] || first[i + 3] !== second[i + 3]) changed++;
  }
  assert.ok(changed > 100, `the chart moved between the two pictures (${changed} pixels changed)`);

  // The top lists are filled from the API.
  await waitFor(() => page.locator('a.ip').count(), { what: 'host links on the dashboard' });
  assert.deepEqual(problems, [], 'no script errors or CSP violations');
});

test('the theme toggle is remembered', { timeout: 60_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/dashboard`);
  const before = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.locator('button.theme').click();
  const theme = await page.evaluate(() => document.documentElement.dataset.theme);
  assert.ok(theme === 'dark' || theme === 'light');
  assert.equal(await page.evaluate(() => localStorage.getItem('sonde-theme')), theme);
  await page.reload();
  await page.locator('.chart canvas').waitFor();
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), theme, 'still after a reload');
  assert.notEqual(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), before);
  await page.waitForTimeout(2500);
  await screenshot(page, `dashboard-${theme}`);
  assert.deepEqual(problems, []);
});

test('deep links: a filtered hosts list, the interface and applications pages', { timeout: 90_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/hosts?sort=packets&q=192.168.`);
  await page.reload();
  await waitFor(async () => {
    const ips = await page.locator('tbody a.ip').allTextContents();
    return ips.length > 0 && ips.every((ip) => ip.includes('192.168.'));
  }, { what: 'only 192.168. hosts' });
  assert.equal(await page.locator('#hosts-q').inputValue(), '192.168.');
  assert.equal(await page.locator('th[aria-sort="descending"] button').textContent(), 'Packets ▼');
  // Sortable headers are reachable with the keyboard.
  await page.locator('th button.sort', { hasText: 'Sent' }).focus();
  await page.keyboard.press('Enter');
  await waitFor(() => page.evaluate(() => location.hash.includes('sort=sent_bytes')), { what: 'sort by keyboard' });

  await page.goto(`${env.sonde.url}/#/interface`);
  await waitFor(async () => Number(await page.locator('td[data-counter="packets"] data').getAttribute('value')) > 0, { what: 'interface counters' });
  await page.locator('td[data-counter="capture_dropped"] data').waitFor();
  // What -f rejected has its own row; sonde's drops are the flow table's alone.
  await page.locator('td[data-counter="filtered"] data').waitFor();
  await page.locator('td[data-counter="table_full_dropped"] data').waitFor();
  // Egress: its card appears with what was forwarded so far (the file replays at its pace).
  const egress = async (k) => Number(await page.locator(`#egress td[data-egress="${k}"] data`).getAttribute('value'));
  await waitFor(async () => (await page.locator('#egress').isVisible()) && (await egress('forwarded')) > 0, { what: 'egress forwarded packets' });
  assert.ok((await egress('forwarded')) <= 1566);
  assert.equal(await egress('dropped'), 0);
  // One row per input, with the kernel's counters (a file's are zero).
  await waitFor(async () => (await page.locator('#inputs tbody tr').count()) === 1, { what: 'one input row' });
  // The flow outputs: the flows file, taking what it is given.
  await waitFor(async () => (await page.locator('#sinks tbody tr').allTextContents()).some((t) => t.includes("flows file '/dev/null'")), { what: 'the flows file among the outputs' });
  assert.equal(await page.locator('#sinks [data-sink-state]').first().getAttribute('data-sink-state'), 'ok');
  await page.waitForTimeout(2500);
  await screenshot(page, 'interface');

  await page.goto(`${env.sonde.url}/#/applications`);
  await waitFor(() => page.locator('tbody a[href^="#/flows?app="]').count(), { what: 'applications' });
  await screenshot(page, 'applications');
  assert.deepEqual(problems, []);
});
