// TCP health in the console: the flows table's Retr. / OOO and RTT columns show what the API
// says of each flow, and a host page's TCP health card shows the API's sums for the host.

import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { CORPUS, login, pageFetch, screenshot, useSondeAndBrowser, waitFor } from './lib.js';

// Read at once: the flows and hosts stay as the capture left them (a replay purges idle hosts
// while a page still polls them).
const env = useSondeAndBrowser(path.join(CORPUS, 'android.pcap'), [], { realtime: false });

test('flows show their retransmissions and round trip; a host page its TCP health', { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/flows`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  // Once a flow with retransmissions is live, its row shows them as the API counts them.
  const flow = await waitFor(
    async () => {
      const flows = (await pageFetch(page, '/api/v1/flows?limit=1000')).body?.flows ?? [];
      return flows.find((f) => f.client_retransmits + f.server_retransmits > 0) ?? null;
    },
    { timeout: 60_000, what: 'a live flow with retransmissions' },
  );
  await page.goto(`${env.sonde.url}/#/flows?host=${flow.client}`);
  // The replay goes on: the table and the API agree at some refresh.
  await waitFor(
    async () => {
      const api = (await pageFetch(page, `/api/v1/flows?host=${flow.client}&limit=1000`)).body?.flows ?? [];
      const want = api.map((f) => f.client_retransmits + f.server_retransmits).filter((n) => n > 0);
      const cells = await page.locator('tbody span[data-retransmits]').evaluateAll((s) => s.map((e) => Number(e.dataset.retransmits)));
      return want.length > 0 && want.every((n) => cells.includes(n));
    },
    { timeout: 60_000, what: "the flows table showing the API's retransmission counts" },
  );
  assert.ok((await page.locator('tbody span.tcp-bad').count()) > 0, 'a flow with retransmissions is marked');
  await screenshot(page, 'tcp-flows');

  // Of the flow's two ends, the one with more live flows (the replay purges idle hosts).
  const live = new Map(((await pageFetch(page, '/api/v1/hosts?limit=1000')).body?.hosts ?? []).map((h) => [h.ip, h.active_flows]));
  const ip = (live.get(flow.server) ?? 0) > (live.get(flow.client) ?? 0) ? flow.server : flow.client;
  await page.goto(`${env.sonde.url}/#/host/${ip}`);
  const card = page.locator('section[data-card="tcp"]');
  await card.waitFor();
  // The replay goes on: the card and the API agree at some refresh (the card every 2 s).
  await waitFor(
    async () => {
      const api = (await pageFetch(page, `/api/v1/hosts/${ip}`)).body?.tcp;
      if (!api) throw new Error(`${ip} is no longer a live host`);
      const shown = await card.locator('dd[data-tcp]').evaluateAll((d) => Object.fromEntries(d.map((e) => [e.dataset.tcp, e.textContent])));
      return shown.retransmits_sent === String(api.retransmits_sent) && shown.retransmits_rcvd === String(api.retransmits_rcvd) && api.retransmits_sent + api.retransmits_rcvd > 0;
    },
    { timeout: 60_000, what: "the card showing the API's retransmissions of the host" },
  );
  await screenshot(page, 'tcp-host');

  // The hosts table ranks hosts by what they sent again.
  await page.goto(`${env.sonde.url}/#/hosts?sort=retransmits`);
  await waitFor(
    async () => {
      const api = (await pageFetch(page, '/api/v1/hosts?sort=retransmits&limit=1')).body.hosts[0];
      const first = await page.locator('tbody tr').first().locator('span[data-retransmits]').getAttribute('data-retransmits').catch(() => null);
      return api.retransmits_sent > 0 && first === String(api.retransmits_sent);
    },
    { timeout: 60_000, what: "the hosts table's first row: the API's most retransmitting host" },
  );
  // And by what their peers sent them again.
  await page.goto(`${env.sonde.url}/#/hosts?sort=retransmits_rcvd`);
  await waitFor(
    async () => {
      const api = (await pageFetch(page, '/api/v1/hosts?sort=retransmits_rcvd&limit=1')).body.hosts[0];
      const first = await page.locator('tbody tr').first().locator('span[data-retransmits-rcvd]').getAttribute('data-retransmits-rcvd').catch(() => null);
      return api.retransmits_rcvd > 0 && first === String(api.retransmits_rcvd);
    },
    { timeout: 60_000, what: "the hosts table's first row: the API's host most retransmitted to" },
  );
  assert.deepEqual(problems, []);
});
