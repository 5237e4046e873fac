// The History page and the long-range charts, against tshark. A first sonde reads netflix.pcap
// into a data directory and exits (which writes every flow to it: a sonde that serves --http
// after a file keeps its last flows in memory until it stops). A second one serves that
// directory, reading an empty capture: the history is then exactly the capture's.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { capinfosPackets, CORPUS, login, screenshot, SONDE, startBrowser, startSonde, tmpdir, tsharkEndpoints, waitFor } from './lib.js';

// 90 s, 60 TCP/UDP conversations (exact in tests/system/EXACTNESS.md) and one IGMP flow, of
// HTTP, TLS, DNS and SSDP.
const CAPTURE = path.join(CORPUS, 'netflix.pcap');

/** A pcap file with a header and no packet. */
const EMPTY_PCAP = Buffer.from('d4c3b2a1020004000000000000000000ffff000001000000', 'hex');

/** tshark's TCP and UDP conversations: "proto a:port b:port" (the pair sorted) → frames. */
function tsharkConversations(file) {
  const r = spawnSync('tshark', ['-r', file, '-q', '-n', '-z', 'conv,tcp', '-z', 'conv,udp'], { encoding: 'utf8' });
  const out = new Map();
  let proto = '';
  for (const line of r.stdout.split('\n')) {
    if (/^(TCP|UDP) Conversations/.test(line)) proto = line.slice(0, 3).toLowerCase();
    // A:port <-> B:port, then frames and bytes (a number and a unit) B→A, A→B and in total.
    const f = line.trim().split(/\s+/);
    if (f[1] !== '<->') continue;
    const key = `${proto} ${[f[0], f[2]].sort().join(' ')}`;
    out.set(key, (out.get(key) ?? 0) + Number(f[9]));
  }
  if (out.size === 0) throw new Error(`tshark conversations of ${file}: nothing read (${r.stderr})`);
  return out;
}

const env = {};
before(async () => {
  env.tmp = tmpdir();
  const data = path.join(env.tmp.dir, 'data');
  const r = spawnSync(SONDE, ['-r', CAPTURE, '--data-dir', data], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`sonde -r ${CAPTURE} --data-dir: ${r.stderr}`);
  const empty = path.join(env.tmp.dir, 'empty.pcap');
  writeFileSync(empty, EMPTY_PCAP);
  env.sonde = await startSonde({ capture: empty, usersFile: path.join(env.tmp.dir, 'users'), args: ['--data-dir', data] });
  env.b = await startBrowser();
});
after(async () => {
  await env.b?.browser.close();
  await env.sonde?.stop();
  env.tmp?.remove();
});

/** The flows table once loaded: each row's 5-tuple and packets, and the pager. */
const flowsTable = (page) =>
  page.evaluate(() => {
    const card = document.querySelector('#history-flows');
    if (card?.dataset.state !== 'done') return null;
    const rows = [...card.querySelectorAll('tbody tr:not(.empty)')].map((tr) => {
      const td = [...tr.querySelectorAll('td')].map((c) => c.textContent);
      const packets = Number(tr.querySelectorAll('td')[9].querySelector('data').value);
      return { client: td[0], clientPort: Number(td[1]), server: td[2], serverPort: Number(td[3]), proto: td[4], packets };
    });
    const [prev, next] = card.querySelectorAll('.pager button');
    return { rows, range: card.querySelector('.pager .range').textContent, prev: !prev.disabled, next: !next.disabled, hash: location.hash };
  });

/** Waits for a table whose URL has `hashPart` and that passes `ok`. */
const tableWhen = (page, hashPart, ok = () => true, what = hashPart) =>
  waitFor(async () => {
    const t = await flowsTable(page);
    return t && t.hash.includes(hashPart) && ok(t) ? t : null;
  }, { what });

const rowKey = (r) => `${r.proto.toLowerCase()} ${[`${r.client}:${r.clientPort}`, `${r.server}:${r.serverPort}`].sort().join(' ')}`;

test('the History page lists the flows of the capture, pages them and filters them', { timeout: 150_000 }, async () => {
  const { page, problems } = env.b;
  await page.goto(`${env.sonde.url}/#/history`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  await page.locator('#nav a[data-view="history"]').waitFor();
  const conversations = tsharkConversations(CAPTURE);

  // The capture is from 2017: the whole history, then page by page.
  await page.getByLabel('Time range').selectOption('all');
  let t = await tableWhen(page, 'range=all', (t) => t.rows.length > 0);
  assert.equal(t.rows.length, 50, 'a full first page');
  assert.ok(t.next && !t.prev, `Next only: ${t.range}`);
  const rows = [...t.rows];
  while (t.next) {
    const first = t.range;
    await page.getByRole('button', { name: 'Next ›' }).click();
    t = await tableWhen(page, 'offset=', (x) => x.range !== first, 'the next page');
    rows.push(...t.rows);
  }
  await screenshot(page, 'history');

  // Every TCP and UDP conversation of tshark's, once, with its packets; and nothing else
  // but the one IGMP flow.
  const shown = new Map();
  for (const r of rows.filter((r) => r.proto === 'TCP' || r.proto === 'UDP')) {
    const k = rowKey(r);
    assert.ok(!shown.has(k), `one flow for ${k}`);
    shown.set(k, r.packets);
  }
  assert.deepEqual(shown, conversations, "the flows are tshark's conversations, packets each");
  const others = rows.filter((r) => r.proto !== 'TCP' && r.proto !== 'UDP');
  assert.deepEqual(others.map((r) => r.proto), ['2'], 'and an IGMP flow (tshark: igmp frames:1)');
  assert.equal(rows.reduce((a, r) => a + r.packets, 0), capinfosPackets(CAPTURE), 'packets over all pages = capinfos');

  // The top hosts' flows are the rows they are in.
  const top = await page.evaluate(() =>
    [...document.querySelectorAll('#card-top-hosts + * tbody tr')].map((tr) => ({ host: tr.querySelector('a.ip').textContent, flows: Number(tr.querySelectorAll('td')[1].querySelector('data').value) })),
  );
  assert.ok(top.length > 1, 'top hosts listed');
  for (const h of top) assert.equal(h.flows, rows.filter((r) => r.client === h.host || r.server === h.host).length, `flows of ${h.host}`);
  const apps = await page.locator('#card-top-applications + * tbody th').allTextContents();
  assert.ok(apps.includes('HTTP.NetFlix') && apps.includes('DNS'), `applications: ${apps}`);

  // A port filter narrows the table to tshark's conversations on that port, from the first page.
  await page.getByLabel('Port', { exact: true }).fill('53');
  await page.getByLabel('Port', { exact: true }).press('Enter');
  t = await tableWhen(page, 'port=53', (t) => !t.hash.includes('offset=') && t.rows.length > 0);
  const dns = [...conversations.keys()].filter((k) => / \S+:53( |$)/.test(k));
  assert.equal(t.rows.length, dns.length, `tshark's ${dns.length} port 53 conversations`);
  assert.ok(t.rows.every((r) => r.clientPort === 53 || r.serverPort === 53), 'every row on port 53');
  assert.ok(!t.next && !t.prev, 'one page');

  // The URL alone gives the same table, with the form filled in.
  await page.reload();
  t = await tableWhen(page, 'port=53', (t) => t.rows.length === dns.length);
  assert.equal(await page.getByLabel('Port', { exact: true }).inputValue(), '53');
  assert.equal(await page.getByLabel('Time range').inputValue(), 'all');

  // A bad time is refused with the server's message naming it.
  await page.getByLabel('From', { exact: true }).fill('yesterday');
  await page.getByLabel('From', { exact: true }).press('Enter');
  await waitFor(async () => /from/.test((await page.locator('p.error').textContent()) ?? ''), { what: 'an error naming from' });
  // The form asks three endpoints (flows, top hosts, top applications) and the browser logs
  // each refusal; on a loaded machine the last ones come after the message is shown, and then
  // fell into the next test's list. Wait for all three before setting them aside.
  const refused = () => problems.filter((p) => /status of 400/.test(p)).length;
  await waitFor(async () => refused() >= 3, { what: 'the three refused requests logged' });
  problems.splice(0, problems.length, ...problems.filter((p) => !/status of 400/.test(p)));
  assert.deepEqual(problems, []);
});

/** The history card's totals once loaded at resolution `res`, and the chart's coloured pixels. */
const seriesCard = (page, res) =>
  waitFor(
    () =>
      page.evaluate((res) => {
        const card = document.querySelector('section.series');
        const shown = card?.querySelector('[data-resolution]');
        if (card?.dataset.state !== 'done' || shown?.dataset.resolution !== res) return null;
        const total = (k) => Number(card.querySelector(`[data-total="${k}"] data`).value);
        // Pixels of the "out" series' colour on the canvas: a line or a dot was drawn.
        const c = card.querySelector('canvas');
        const want = getComputedStyle(document.documentElement).getPropertyValue('--c1').trim();
        const [r, g, b] = [1, 3, 5].map((i) => parseInt(want.slice(i, i + 2), 16));
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let drawn = 0;
        for (let i = 0; i < px.length; i += 4) if (Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) < 30 && px[i + 3] > 200) drawn++;
        return { out: total('packets_out'), in: total('packets_in'), filled: Number(shown.dataset.filled), drawn, pressed: card.querySelector('[aria-pressed="true"]').textContent };
      }, res),
    { what: `the history chart at ${res}` },
  );

test("a host's and the interface's history charts add up to tshark's packets", { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  const ip = '192.168.1.7';
  const tshark = tsharkEndpoints(CAPTURE).get(ip);
  await page.goto(`${env.sonde.url}/#/host/${ip}`);

  // The last hour (ending at the capture's last second), per second: 90 s of data and gaps.
  let s = await seriesCard(page, '1s');
  assert.equal(s.pressed, '1 h');
  assert.ok(s.filled > 0 && s.filled <= 91, `seconds with data: ${s.filled}`);
  assert.ok(s.drawn > 0, 'the lines are drawn');
  assert.deepEqual([s.out, s.in], [tshark.txPackets, tshark.rxPackets], "packets sent and received = tshark's endpoint");

  // A year, per day: the same totals in one point, drawn as a dot between gaps.
  await page.getByRole('button', { name: '1 y' }).click();
  s = await seriesCard(page, '1d');
  assert.equal(s.pressed, '1 y');
  assert.ok(s.filled >= 1 && s.filled <= 2, `days with data: ${s.filled}`);
  assert.ok(s.drawn > 0, 'the day is drawn');
  assert.deepEqual([s.out, s.in], [tshark.txPackets, tshark.rxPackets]);
  await screenshot(page, 'history-host');

  // The interface: every packet of the capture, one way or the other.
  await page.goto(`${env.sonde.url}/#/interface`);
  s = await seriesCard(page, '1s');
  assert.equal(s.out + s.in, capinfosPackets(CAPTURE));
  assert.ok(s.drawn > 0, 'the lines are drawn');
  await screenshot(page, 'history-interface');
  // The host is not live (the serving sonde read nothing): its page says so, and that is all.
  assert.deepEqual(problems.filter((p) => !/status of 404/.test(p)), []);
});
