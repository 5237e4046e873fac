// A filter narrows the live flows table: fewer flows, and every row matches. The filter is in
// the URL, and the URL alone (a deep link) gives the same table.

import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { CORPUS, login, screenshot, useSondeAndBrowser, waitFor } from './lib.js';

const CAPTURE = path.join(CORPUS, 'telegram.pcap');

const env = useSondeAndBrowser(CAPTURE);

/** The table's total (from the pager) and the ports of each row, read at one instant. */
const table = (page) =>
  page.evaluate(() => {
    const total = Number(document.querySelector('.pager .range')?.dataset.total ?? -1);
    const rows = [...document.querySelectorAll('table.data tbody tr:not(.empty)')].map((tr) => {
      const td = tr.querySelectorAll('td');
      return { client_port: Number(td[1].textContent), server_port: Number(td[3].textContent), proto: td[4].textContent };
    });
    return { total, rows, hash: location.hash };
  });

test('a port filter narrows the flows table', { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/flows`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);

  // Enough flows, and some that are not DNS.
  const before = await waitFor(
    async () => {
      const t = await table(page);
      return t.rows.some((r) => r.server_port !== 53 && r.client_port !== 53) && t.rows.some((r) => r.server_port === 53) ? t : null;
    },
    { timeout: 60_000, what: 'DNS and other flows' },
  );

  await page.getByLabel('Port', { exact: true }).fill('53');
  await page.getByLabel('Port', { exact: true }).press('Enter');
  const after = await waitFor(
    async () => {
      const t = await table(page);
      return t.hash.includes('port=53') && t.rows.length > 0 && t.rows.every((r) => r.client_port === 53 || r.server_port === 53) ? t : null;
    },
    { what: 'only port 53 in the table' },
  );
  await screenshot(page, 'flows-port-53');
  assert.ok(after.total < before.total || after.rows.length < before.rows.length, `fewer flows (${after.total} of ${before.total})`);

  // A protocol filter on top: UDP only.
  await page.getByLabel('Protocol', { exact: true }).selectOption('17');
  await waitFor(
    async () => {
      const t = await table(page);
      return t.hash.includes('proto=17') && t.rows.length > 0 && t.rows.every((r) => r.proto === 'UDP' && (r.client_port === 53 || r.server_port === 53));
    },
    { what: 'UDP port 53 only' },
  );

  // The deep link alone gives the filtered table, with the form filled in.
  await page.goto(`${env.sonde.url}/#/flows?port=53`);
  await page.reload();
  await waitFor(async () => {
    const t = await table(page);
    return t.rows.length > 0 && t.rows.every((r) => r.client_port === 53 || r.server_port === 53);
  });
  assert.equal(await page.getByLabel('Port', { exact: true }).inputValue(), '53');
  assert.deepEqual(problems, []);
});
