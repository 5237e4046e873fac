// A hostile capture: names off the wire carrying <script>, an <img onerror>, quotes and control
// characters. The console shows them as text in the flows table, on the host page and on the
// History page (from the data directory); nothing runs (window.__pwned stays undefined, no
// dialog) and no element comes from them.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { CLIENT, DNS_LABELS, HTTP_HOST, HTTP_URL, IMG, RESOLVED, SCRIPT, SNI, USER_AGENT, writeHostilePcap } from './hostile-pcap.js';
import { login, pageFetch, screenshot, SONDE, startBrowser, startSonde, tmpdir, waitFor } from './lib.js';

/** What sonde keeps of a wire string: control characters become U+FFFD. */
const kept = (s) => s.replace(/[\x00-\x1f\x7f]/g, '\uFFFD');

let sonde, b, tmp;
const dialogs = [];
before(async () => {
  tmp = tmpdir();
  const capture = path.join(tmp.dir, 'hostile.pcap');
  writeHostilePcap(capture);
  // A first run stores the capture's flows in the history, which the History page shows.
  const data = path.join(tmp.dir, 'data');
  const r = spawnSync(SONDE, ['-r', capture, '--data-dir', data, '-q'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`sonde -r ${capture} --data-dir: ${r.stderr}`);
  sonde = await startSonde({ capture, usersFile: path.join(tmp.dir, 'users'), args: ['--data-dir', data] });
  b = await startBrowser();
  b.page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
});
after(async () => {
  await b?.browser.close();
  await sonde?.stop();
  tmp?.remove();
});

/** Nothing ran and nothing was made from the data. */
async function assertClean(page, where) {
  const s = await page.evaluate(() => ({
    pwned: typeof window.__pwned,
    scripts: [...document.scripts].map((x) => x.getAttribute('src')),
    imgs: document.querySelectorAll('img, svg, iframe, object, embed').length,
    handlers: [...document.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length,
  }));
  assert.equal(s.pwned, 'undefined', `${where}: window.__pwned stays undefined`);
  assert.ok(s.scripts.every((src) => src && src.startsWith('/assets/')), `${where}: only the console's own scripts: ${s.scripts}`);
  assert.equal(s.imgs, 0, `${where}: no <img>/<svg> from the data`);
  assert.equal(s.handlers, 0, `${where}: no on* attributes`);
  assert.deepEqual(dialogs, [], `${where}: no dialog`);
}

test('wire strings are shown as text, never run', { timeout: 120_000 }, async () => {
  const { page, problems } = b;
  await page.goto(`${sonde.url}/#/flows?host=${CLIENT}`);
  await login(page, sonde.url, 'admin', sonde.adminPassword);

  // The premise: the API carries the hostile strings (so the console really got them).
  const api = await waitFor(
    async () => {
      const r = await pageFetch(page, `/api/v1/flows?host=${CLIENT}`);
      // Not the client's fourth flow, to the address the DNS answer gave (named after it).
      const flows = (r.body?.flows ?? []).filter((f) => f.server !== RESOLVED);
      return flows.length === 3 && flows.every((f) => Object.keys(f.info ?? {}).length > 0) ? { flows } : null;
    },
    { timeout: 60_000, what: 'the three hostile flows with their info' },
  );
  const infos = api.flows.map((f) => f.info);
  assert.ok(infos.some((i) => i.tls_sni === kept(SNI)), 'SNI in the API');
  assert.ok(infos.some((i) => i.http_host === kept(HTTP_HOST)), 'Host in the API');
  assert.ok(infos.some((i) => i.dns_query === kept(DNS_LABELS.join('.'))), 'DNS query in the API');

  // The flows table shows each string, character for character, as text.
  const texts = () => page.locator('table.data tbody .info .v').allTextContents();
  const shown = await waitFor(async () => {
    const t = await texts();
    return t.length >= 5 ? t : null;
  }, { what: 'info cells in the flows table' });
  for (const [what, s] of [
    ['SNI', SNI],
    ['Host', HTTP_HOST],
    ['URL', HTTP_URL],
    ['User-Agent', USER_AGENT],
    ['DNS query', DNS_LABELS.join('.')],
  ]) {
    assert.ok(shown.includes(kept(s)), `${what} shown as text: ${JSON.stringify(shown)}`);
  }
  assert.ok(shown.some((t) => t.includes(SCRIPT)) && shown.some((t) => t.includes(IMG)));
  assert.ok(shown.some((t) => t.includes('\uFFFD')), 'control characters shown as U+FFFD');
  await screenshot(page, 'hostile-flows');
  await assertClean(page, 'flows table');

  // The host page of the client: same strings, same result.
  await page.locator('tbody a.ip', { hasText: CLIENT }).first().click();
  await waitFor(() => page.evaluate((ip) => location.hash === `#/host/${ip}`, CLIENT));
  const hostShown = await waitFor(async () => {
    const t = await page.locator('section:has(#host-flows) tbody .info .v').allTextContents();
    return t.length >= 5 ? t : null;
  }, { what: 'info on the host page' });
  assert.ok(hostShown.includes(kept(SNI)) && hostShown.includes(kept(HTTP_HOST)) && hostShown.includes(kept(DNS_LABELS.join('.'))));
  // The dashboard and the other pages list the same flows.
  await screenshot(page, 'hostile-host');
  await assertClean(page, 'host page');
  for (const view of ['dashboard', 'hosts', 'applications']) {
    await page.goto(`${sonde.url}/#/${view}`);
    await page.waitForTimeout(1500);
    await assertClean(page, view);
  }
  // The hosts table names the resolved address by the hostile DNS name, as text.
  await page.goto(`${sonde.url}/#/hosts?q=${RESOLVED}`);
  const row = page.locator('tbody tr', { has: page.locator('a.ip', { hasText: RESOLVED }) });
  const cells = await waitFor(async () => {
    const t = await row.locator('td').allTextContents();
    return t.includes(kept(DNS_LABELS.join('.'))) ? t : null;
  }, { what: `the DNS name of ${RESOLVED} in the hosts table` });
  assert.ok(cells.length > 0);
  await screenshot(page, 'hostile-hosts');
  await assertClean(page, 'hosts with a DNS name');
  // The History page shows the stored flows' strings the same way.
  await page.goto(`${sonde.url}/#/history?range=all&host=${CLIENT}`);
  const stored = await waitFor(async () => {
    const t = await page.locator('#history-flows tbody .info .v').allTextContents();
    return t.length >= 5 ? t : null;
  }, { what: 'info cells on the History page' });
  for (const s of [SNI, HTTP_HOST, HTTP_URL, USER_AGENT, DNS_LABELS.join('.')]) {
    assert.ok(stored.includes(kept(s)), `${JSON.stringify(s)} shown as text in the history: ${JSON.stringify(stored)}`);
  }
  await screenshot(page, 'hostile-history');
  await assertClean(page, 'history');
  assert.deepEqual(problems, [], 'no script errors or CSP violations');
});
