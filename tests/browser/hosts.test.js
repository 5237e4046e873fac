// Clicking a host in the hosts table opens its page, whose counters are the API's and, once the
// capture has been replayed to its end, tshark's IPv4 endpoints.

import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { capinfosPackets, CORPUS, login, pageFetch, screenshot, tsharkEndpoints, useSondeAndBrowser, waitFor } from './lib.js';

// 15 s, 16 hosts: short enough to wait for its end.
const CAPTURE = path.join(CORPUS, 'bittorrent.pcap');

const env = useSondeAndBrowser(CAPTURE);

/** The value (exact, from <data value>) of each counter on the host page. */
const counters = (page) =>
  page.evaluate(() => {
    const out = {};
    for (const dd of document.querySelectorAll('dd[data-counter]')) out[dd.dataset.counter] = Number(dd.querySelector('data').value);
    return out;
  });

test('a host from the hosts table shows its counters', { timeout: 150_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/hosts`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);

  // Wait for the whole file: then the counters stop moving and tshark is the oracle.
  const total = capinfosPackets(CAPTURE);
  await waitFor(async () => (await pageFetch(page, '/api/v1/interface')).body?.packets === total, { timeout: 90_000, what: `all ${total} packets replayed` });
  const tshark = tsharkEndpoints(CAPTURE);

  // Sorting by a header is reflected in the URL and in aria-sort.
  await page.getByRole('button', { name: 'Packets', exact: true }).click();
  await waitFor(() => page.evaluate(() => location.hash.includes('sort=packets')), { what: 'sort=packets in the URL' });
  assert.equal(await page.locator('th[aria-sort]').getAttribute('aria-sort'), 'descending');

  // The busiest IPv4 host in the table.
  await waitFor(() => page.locator('tbody a.ip').count(), { what: 'hosts in the table' });
  const ips = await page.locator('tbody a.ip').allTextContents();
  const ip = ips.find((a) => tshark.has(a));
  assert.ok(ip, `an IPv4 host of tshark's among ${ips}`);
  await screenshot(page, 'hosts');
  await page.locator('tbody a.ip', { hasText: new RegExp(`^${ip.replaceAll('.', '\\.')}$`) }).first().click();

  await waitFor(() => page.evaluate((ip) => location.hash === `#/host/${ip}`, ip), { what: `the URL of ${ip}` });
  // The view follows the URL on the hashchange event, a task after the URL changes.
  await waitFor(async () => (await page.locator('h1').textContent()) === `Host ${ip}`, { what: `the heading of ${ip}` });
  await page.locator('dd[data-counter="sent_packets"]').waitFor();
  const shown = await counters(page);
  await screenshot(page, 'host');

  // Equal to the API...
  const api = (await pageFetch(page, `/api/v1/hosts/${ip}`)).body;
  assert.equal(api.host.length, 1, 'one VLAN');
  for (const k of ['sent_bytes', 'rcvd_bytes', 'sent_packets', 'rcvd_packets', 'flows_as_client', 'flows_as_server', 'active_flows']) {
    assert.equal(shown[k], api.host[0][k], `${k} as the API reports it`);
  }
  // ... and to tshark.
  const t = tshark.get(ip);
  assert.equal(shown.sent_packets, t.txPackets, "packets sent = tshark's Tx Packets");
  assert.equal(shown.rcvd_packets, t.rxPackets, "packets received = tshark's Rx Packets");

  // The readable text next to the exact value.
  const text = await page.locator('dd[data-counter="sent_bytes"]').textContent();
  assert.match(text, /^\d+(\.\d+)? (K|M|G)?B$/, `bytes in readable units: ${text}`);

  // Its peers and flows are listed, as links to hosts.
  await waitFor(() => page.locator('section:has(#host-flows) tbody a.ip').count(), { what: 'flows of the host' });
  assert.deepEqual(problems, []);
});
