// The analytics pages: Anomalies, Top-N and Filters.
//
// Two sondes. One replays a forged capture of attacks (attack-pcap.js: a port scan, an IP scan,
// UDP probes answered by ICMP port unreachables, then a SYN flood from spoofed sources) at its
// real pace, with 5 s intervals and a SYN threshold of 1000/s: the Anomalies page must list the
// scanner with the target count the API reports (the ports the capture probes) and the flood's
// victim while the flood is in progress. The other reads netflix.pcap whole into a data
// directory with one interval of an hour (--top-interval 3600, so the capture is one interval)
// and two filter-sets: the Top-N page's top talker and port are the API's and tshark's, the
// Filters page charts the configured expressions with tcpdump's counts, and strings from the
// API that could be markup (a host, an application, a set name, a label, an expression) are
// shown as text.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { FLOOD_PPS, ICMP_SENDER, IP_SCAN_HOSTS, IP_SCANNER, PORT_SCAN_PORTS, PORT_SCANNER, PORT_TARGET, T0, VICTIM, writeAttackPcap } from './attack-pcap.js';
import { IMG, SCRIPT } from './hostile-pcap.js';
import { CORPUS, login, pageFetch, screenshot, startBrowser, startSonde, tmpdir, tsharkEndpoints, waitFor } from './lib.js';

const CAPTURE = path.join(CORPUS, 'netflix.pcap');
/** A real expression that reads like a tag (`<ip[1] or ip[2]>`) to an HTML parser. */
const ODD_EXPR = 'ip[0]<ip[1] or ip[2]>0';
const SETS = [
  ['web', [['http', 'tcp port 80'], ['tls', 'tcp port 443'], ['dns', 'port 53']]],
  ['odd', [['tags', ODD_EXPR]]],
];
const SYN_THRESHOLD = 1000;

/** tshark's frames matching a display filter, and their bytes on the wire. */
function tsharkCount(file, filter) {
  const r = spawnSync('tshark', ['-r', file, '-n', '-Y', filter, '-T', 'fields', '-e', 'frame.len'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const lens = r.stdout.split('\n').filter(Boolean).map(Number);
  if (r.status !== 0) throw new Error(`tshark -Y '${filter}': ${r.stderr}`);
  return { packets: lens.length, bytes: lens.reduce((a, b) => a + b, 0) };
}

const env = {};
before(async () => {
  env.tmp = tmpdir();
  const attack = path.join(env.tmp.dir, 'attack.pcap');
  writeAttackPcap(attack);
  env.attack = await startSonde({
    capture: attack,
    usersFile: path.join(env.tmp.dir, 'users-attack'),
    args: ['--top-interval', '5', '--threshold', `ddos.syn_pps=${SYN_THRESHOLD}`],
  });
  env.corpus = await startSonde({
    capture: CAPTURE,
    realtime: false,
    usersFile: path.join(env.tmp.dir, 'users-corpus'),
    args: [
      '--top-interval', '3600',
      // Lists of 5: netflix has 21 talkers, so the range's sums say they were cut.
      '--top-n', '5',
      '--data-dir', path.join(env.tmp.dir, 'data'),
      ...SETS.flatMap(([name, exprs]) => ['--filter-set', `${name}=${exprs.map(([l, e]) => `${l}:${e}`).join(';')}`]),
    ],
  });
  // A browser each: the session cookies of two sondes on one address would overwrite each other.
  env.ba = await startBrowser();
  env.bc = await startBrowser();
  env.dialogs = [];
  for (const b of [env.ba, env.bc]) {
    b.page.on('dialog', (d) => {
      env.dialogs.push(d.message());
      void d.dismiss();
    });
  }
});
after(async () => {
  await env.ba?.browser.close();
  await env.bc?.browser.close();
  await env.attack?.stop();
  await env.corpus?.stop();
  env.tmp?.remove();
});

/** A detection row of the Anomalies page: its data attributes and cells' text. */
const detectionRow = (page, box, type, host) =>
  page.evaluate(
    ([box, type, host]) => {
      const tr = document.querySelector(`#anomalies-${box} tr.detection[data-type="${type}"][data-host="${host}"]`);
      if (!tr) return null;
      return { ...tr.dataset, cells: [...tr.cells].map((c) => c.textContent), expanded: tr.querySelector('button.expand').getAttribute('aria-expanded') };
    },
    [box, type, host],
  );

test('the Anomalies page lists the SYN flood in progress and the scanners with their targets', { timeout: 120_000 }, async () => {
  const { page, problems } = env.ba;
  const { url } = env.attack;
  await page.goto(`${url}/#/anomalies`);
  await login(page, url, 'admin', env.attack.adminPassword);
  // Analytics on, no filter-set: Top-N and Anomalies in the navigation, no Filters.
  const nav = await page.locator('#nav a').evaluateAll((as) => as.map((a) => a.dataset.view));
  assert.ok(nav.includes('top') && nav.includes('anomalies') && !nav.includes('filters'), `navigation: ${nav}`);

  // The flood, while it lasts (the capture's seconds 2 to 12): the victim, inbound, with the
  // threshold the API says was crossed.
  const flood = await waitFor(
    async () => {
      const r = await pageFetch(page, '/api/v1/anomalies');
      return r.body?.active.find((d) => d.type === 'syn_flood' && d.host === VICTIM);
    },
    { timeout: 30_000, what: 'the SYN flood in the API' },
  );
  assert.equal(flood.direction, 'in');
  const crossed = flood.evidence.crossed.find((c) => c.metric === 'syn_pps');
  assert.equal(crossed.threshold, SYN_THRESHOLD);
  assert.equal(crossed.peak, FLOOD_PPS, 'the peak SYN rate is the capture’s');
  const row = await waitFor(() => detectionRow(page, 'active', 'syn_flood', VICTIM), { what: 'the flood in progress on the page' });
  assert.equal(row.cells[1], 'SYN flood');
  assert.equal(row.cells[2], VICTIM);
  assert.equal(row.cells[3], 'to it (in)');
  assert.match(row.cells[7], new RegExp(`SYN/s ${FLOOD_PPS.toLocaleString('en-US')} \\(threshold ${SYN_THRESHOLD.toLocaleString('en-US')}\\)`));
  await page.locator(`#anomalies-active tr.detection[data-host="${VICTIM}"] button.expand`).click();
  const floodEvidence = page.locator(`#active-evidence-${flood.id}`);
  await floodEvidence.locator('[data-ev="top_ports"] tbody th', { hasText: '80/TCP' }).waitFor();
  assert.ok((await floodEvidence.locator('[data-ev="top_sources"] tbody tr').count()) > 0, 'top sources listed');

  // The scans end with the interval after theirs (the capture's 5 to 10 s): then the API's
  // recent list has them, and the page shows the same target counts.
  const ended = await waitFor(
    async () => {
      const r = await pageFetch(page, '/api/v1/anomalies');
      const recent = r.body?.recent ?? [];
      const port = recent.find((d) => d.type === 'scan.port' && d.host === PORT_SCANNER && d.event === 'end');
      const ip = recent.find((d) => d.type === 'scan.ip' && d.host === IP_SCANNER && d.event === 'end');
      return port && ip ? { port, ip } : null;
    },
    { timeout: 40_000, what: 'the scans ended in the API' },
  );
  assert.equal(ended.port.targets, PORT_SCAN_PORTS, 'the API counts every port probed');
  assert.equal(ended.ip.targets, IP_SCAN_HOSTS, 'and every host probed');
  for (const [type, host, d, unit] of [
    ['scan.port', PORT_SCANNER, ended.port, 'ports'],
    ['scan.ip', IP_SCANNER, ended.ip, 'hosts'],
  ]) {
    const r = await waitFor(() => detectionRow(page, 'recent', type, host), { what: `${type} of ${host} on the page` });
    assert.equal(Number(r.targets), d.targets);
    assert.equal(r.cells[7], `${d.targets.toLocaleString('en-US')} ${unit} tried`);
  }
  // ICMP errors: the host that answered the UDP probes.
  await waitFor(() => detectionRow(page, 'recent', 'icmp_errors', ICMP_SENDER), { what: 'the ICMP error sender' });
  // The port scan's evidence: its target and the ports it tried.
  await page.locator(`#anomalies-recent tr.detection[data-type="scan.port"][data-host="${PORT_SCANNER}"] button.expand`).click();
  // Its row, opened, must survive the refreshes (the same element: not rebuilt). (The flood
  // may end meanwhile: sonde ends every detection once the replayed file is over.)
  const scanRow = `#anomalies-recent tr.detection[data-type="scan.port"][data-host="${PORT_SCANNER}"]`;
  await page.evaluate((sel) => (document.querySelector(sel).__kept = true), scanRow);
  const scan = page.locator(`#ended-evidence-${ended.port.id}`);
  const target = await scan.locator('[data-ev="scan_targets"] tbody tr').first().locator('th, td').allTextContents();
  assert.equal(target[0], PORT_TARGET);
  assert.equal(Number(target[1]), PORT_SCAN_PORTS);
  assert.match(target[2], /^1\/tcp 2\/tcp 3\/tcp /);
  await screenshot(page, 'anomalies');
  const stamp = await page.locator('.live').textContent();
  await waitFor(async () => (await page.locator('.live').textContent()) !== stamp, { what: 'a refresh' });
  const kept = await page.evaluate((sel) => {
    const tr = document.querySelector(sel);
    return { same: tr?.__kept === true, open: tr?.querySelector('button.expand').getAttribute('aria-expanded') };
  }, scanRow);
  assert.deepEqual(kept, { same: true, open: 'true' }, 'a refresh keeps the row and its evidence open');

  // The type filter narrows both lists, and is in the URL.
  await page.getByLabel('Type', { exact: true }).selectOption('scan.port');
  await waitFor(() => page.evaluate(() => location.hash === '#/anomalies?type=scan.port' && document.querySelector('#anomalies').dataset.type === 'scan.port'), { what: 'the filter in the URL' });
  const types = async () =>
    waitFor(async () => {
      const t = await page.evaluate(() => (document.querySelector('#anomalies').dataset.state === 'done' ? [...document.querySelectorAll('tr.detection')].map((tr) => tr.dataset.type) : null));
      return t && t.length > 0 && t.every((x) => x === 'scan.port') ? t : null;
    }, { what: 'port scans only' });
  assert.ok((await types()).length >= 1);
  await page.reload();
  assert.ok((await types()).length >= 1);
  assert.equal(await page.getByLabel('Type', { exact: true }).inputValue(), 'scan.port');
  await screenshot(page, 'anomalies-port-scans');

  // The worm graph of the Top-N page: the two SYN scanners were noisy in the first interval.
  const worm = (await pageFetch(page, '/api/v1/interval')).body.worm;
  assert.equal(worm.find((w) => w.start === T0)?.noisy_hosts, 2, JSON.stringify(worm));
  await page.goto(`${url}/#/top`);
  const summary = await waitFor(async () => {
    const t = await page.locator('#top-worm .sr-only').textContent();
    return t.startsWith('Noisy hosts') ? t : null;
  }, { what: 'the worm graph' });
  assert.equal(summary, `Noisy hosts in the last ${worm.length} intervals: ${worm.map((w) => w.noisy_hosts).join(', ')}.`);
  await screenshot(page, 'top-attack');
  assert.deepEqual(problems, []);
});

/** The first row of a Top-N list: its cells' text and the <data> values. */
const firstRow = (page, list) =>
  page.evaluate((list) => {
    const tr = document.querySelector(`#top-${list} tbody tr:not(.empty)`);
    if (!tr) return null;
    return { cells: [...tr.querySelectorAll('th, td')].map((c) => c.textContent), values: [...tr.querySelectorAll('data')].map((d) => Number(d.value)) };
  }, list);

test("the Top-N page's top talker and port are the interval's, and tshark's", { timeout: 120_000 }, async () => {
  const { page, problems } = env.bc;
  const { url } = env.corpus;
  await page.goto(`${url}/#/top`);
  await login(page, url, 'admin', env.corpus.adminPassword);
  const api = await waitFor(async () => (await pageFetch(page, '/api/v1/interval')).body?.interval, { what: 'the interval' });
  await waitFor(() => page.evaluate(() => document.querySelector('#top-lists')?.dataset.state === 'done' && document.querySelector('#top-interval [data-start]')), { what: 'the lists' });

  // The interval, as dates.
  const shown = await page.evaluate(() => {
    const s = document.querySelector('#top-interval [data-start]');
    return { start: Number(s.dataset.start), end: Number(s.dataset.end), times: [...s.querySelectorAll('time')].map((t) => t.getAttribute('datetime')) };
  });
  assert.deepEqual(shown, { start: api.start, end: api.end, times: [api.start, api.end].map((t) => new Date(t * 1000).toISOString()) });

  // The top talker: host, packets and bytes of the API, and tshark's packets sent by that host
  // (bytes: IP bytes, tshark's frame bytes less the 14 bytes of each Ethernet header).
  const talker = await firstRow(page, 'talkers');
  const top = api.talkers[0];
  assert.equal(talker.cells[1], top.host);
  assert.deepEqual(talker.values, [top.packets, top.bytes]);
  const tshark = tsharkCount(CAPTURE, `ip.src==${top.host}`);
  assert.equal(top.packets, tsharkEndpoints(CAPTURE).get(top.host).txPackets, "the top talker's packets are tshark's");
  assert.equal(top.packets, tshark.packets);
  assert.equal(top.bytes, tshark.bytes - 14 * tshark.packets, "and its IP bytes");

  // The top port.
  const port = await firstRow(page, 'ports');
  const p = api.ports[0];
  assert.equal(port.cells[1], `${p.port}/${p.proto.toUpperCase()}`);
  assert.deepEqual(port.values, [p.packets, p.bytes, p.flows]);
  // The whole capture is the interval, its last second too (26 packets, all on port 80).
  assert.equal(p.packets, tsharkCount(CAPTURE, `${p.proto}.port==${p.port}`).packets, "the top port's packets are tshark's");
  // SYN senders, scanners, ICMP lists and the worm graph are there for the live interval.
  assert.equal(await page.locator('#top-live-only').isVisible(), true);
  assert.ok((await page.locator('#top-syn tbody tr:not(.empty)').count()) > 0, 'SYN senders listed');
  await screenshot(page, 'top');

  // A range of the history: the same lists added up over the stored intervals, with a note
  // that the lists were cut (--top-n 5 for 21 talkers).
  await page.getByLabel('Lists of').selectOption('all');
  await waitFor(() => page.evaluate(() => location.hash.includes('range=all') && document.querySelector('#top-lists').dataset.state === 'done' && document.querySelector('#top-lists').dataset.mode === 'range'), {
    what: 'the range',
  });
  const all = (await pageFetch(page, '/api/v1/history/intervals/top/talkers?from=0&limit=25')).body;
  assert.ok(all.intervals >= 1 && all.intervals_cut >= 1, `stored intervals: ${JSON.stringify({ intervals: all.intervals, cut: all.intervals_cut })}`);
  const t = await firstRow(page, 'talkers');
  assert.equal(t.cells[1], all.rows[0].host);
  assert.deepEqual(t.values, [all.rows[0].packets, all.rows[0].bytes]);
  const note = await page.locator('#top-cut').textContent();
  assert.match(note, new RegExp(`talkers in ${all.intervals_cut} of ${all.intervals}`), note);
  assert.equal(await page.locator('#top-live-only').isVisible(), false);
  await screenshot(page, 'top-range');
  // The URL alone gives the range again.
  await page.reload();
  await waitFor(() => page.evaluate(() => document.querySelector('#top-lists')?.dataset.mode === 'range' && document.querySelector('#top-lists').dataset.state === 'done'), { what: 'the range after a reload' });
  assert.equal(await page.getByLabel('Lists of').inputValue(), 'all');

  // netflix.pcap has nothing to detect: the Anomalies page says what would appear there.
  await page.goto(`${url}/#/anomalies`);
  await waitFor(() => page.evaluate(() => document.querySelector('#anomalies')?.dataset.state === 'done'), { what: 'the anomalies' });
  assert.deepEqual((await pageFetch(page, '/api/v1/anomalies')).body, { active: [], recent: [], totals: {} });
  assert.equal(await page.locator('#anomalies-empty').isVisible(), true);
  assert.match(await page.locator('#anomalies-empty').textContent(), /port and IP scans, SYN floods/);
  assert.deepEqual(await page.locator('#anomalies tr.empty').allTextContents(), ['No detection in progress.', 'No detection has ended since sonde started.']);
  await screenshot(page, 'anomalies-empty');
  assert.deepEqual(problems, []);
});

/** A filter-set card once shown: legend labels, table, points and drawn pixels. */
const setCard = (page, name, mode) =>
  waitFor(
    () =>
      page.evaluate(
        ([name, mode]) => {
          const card = document.querySelector(`section.filterset[data-set="${name}"]`);
          if (card?.dataset.state !== 'done' || card.dataset.mode !== mode) return null;
          const legend = [...card.querySelectorAll('.u-legend .u-series .u-label')].map((l) => l.textContent).slice(1);
          const rows = [...card.querySelectorAll('table.data tbody tr')].map((tr) => ({
            label: tr.querySelector('[data-label]').textContent,
            expr: tr.querySelector('code.expr').textContent,
            packets: Number(tr.querySelectorAll('data')[0].value),
            bytes: Number(tr.querySelectorAll('data')[1].value),
            shown: Number(tr.querySelector('[data-shown] data').value),
          }));
          // Pixels of the second line's colour: the chart was drawn.
          const c = card.querySelector('canvas');
          const want = getComputedStyle(document.documentElement).getPropertyValue('--c2').trim();
          const [r, g, b] = [1, 3, 5].map((i) => parseInt(want.slice(i, i + 2), 16));
          const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let drawn = 0;
          for (let i = 0; i < px.length; i += 4) if (Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) < 30 && px[i + 3] > 200) drawn++;
          return { legend, rows, points: Number(card.dataset.points), resolution: card.dataset.resolution, drawn, title: card.querySelector('h2').textContent };
        },
        [name, mode],
      ),
    { what: `the chart of ${name} (${mode})` },
  );

test('the Filters page charts each set, a line per configured expression, live and stored', { timeout: 120_000 }, async () => {
  const { page, problems } = env.bc;
  const { url } = env.corpus;
  await page.goto(`${url}/#/filters`);
  await page.locator('#nav a[data-view="filters"]').waitFor();
  const api = (await pageFetch(page, '/api/v1/filtersets?seconds=0')).body;
  const tls = tsharkCount(CAPTURE, 'tcp.port==443');
  const http = tsharkCount(CAPTURE, 'tcp.port==80');

  // Live: the last five minutes of seconds, which hold the whole capture (90 s).
  let web = await setCard(page, 'web', 'live');
  assert.equal(web.title, 'web');
  assert.deepEqual(web.legend, ['http', 'tls', 'dns'], 'the legend has the configured labels');
  assert.deepEqual(web.rows.map((r) => [r.label, r.expr]), SETS[0][1]);
  assert.ok(web.points > 0 && web.drawn > 0, `points ${web.points}, pixels ${web.drawn}`);
  const apiTls = api.sets[0].expressions[1];
  assert.deepEqual([web.rows[1].packets, web.rows[1].bytes], [apiTls.packets, apiTls.bytes]);
  assert.equal(apiTls.packets, tls.packets, "tls's packets are tshark's tcp.port==443");
  assert.equal(apiTls.bytes, tls.bytes, 'and its bytes (on the wire)');
  assert.equal(web.rows[1].shown, tls.packets, 'the chart holds them all');
  assert.deepEqual([web.rows[0].packets, web.rows[0].shown], [http.packets, http.packets], "http's, the capture's last second included");
  const odd = await setCard(page, 'odd', 'live');
  assert.deepEqual(odd.legend, ['tags']);
  assert.equal(odd.rows[0].expr, ODD_EXPR, 'an expression with < and > is text');
  await screenshot(page, 'filters');

  // Bytes per second.
  await page.getByRole('button', { name: 'Bytes/s' }).click();
  await waitFor(() => page.evaluate(() => location.hash.includes('unit=bytes')), { what: 'unit=bytes' });
  web = await waitFor(async () => {
    const c = await setCard(page, 'web', 'live');
    return c.rows[1].shown === tls.bytes ? c : null;
  }, { what: 'the chart in bytes' });
  assert.ok(web.drawn > 0);

  // The stored series (--data-dir): the last hour up to the newest second stored, per second.
  await page.getByRole('button', { name: '1 h' }).click();
  web = await setCard(page, 'web', '1h');
  assert.equal(web.resolution, '1s');
  assert.ok(web.points > 0 && web.drawn > 0, `points ${web.points}, pixels ${web.drawn}`);
  assert.equal(web.rows[1].shown, tls.bytes, 'the stored seconds hold the same bytes');
  assert.equal(web.rows[0].shown, http.bytes, "http's too, the capture's last second included");
  await page.getByRole('button', { name: 'Packets/s' }).click();
  web = await waitFor(async () => {
    const c = await setCard(page, 'web', '1h');
    return c.rows[1].shown === tls.packets ? c : null;
  }, { what: 'the stored packets' });
  assert.equal(web.rows[0].shown, http.packets);
  assert.deepEqual(web.legend, ['http', 'tls', 'dns']);
  await screenshot(page, 'filters-history');
  assert.deepEqual(problems, []);
});

test('hosts, applications, set names, labels and expressions from the API are text', { timeout: 120_000 }, async () => {
  const { page, problems } = env.bc;
  const { url } = env.corpus;
  const HOST = `${SCRIPT}${IMG}`;
  const APP = `TLS.${IMG}`;
  // The API's answers with markup in every string the server does not restrict (a sonde cannot
  // produce most of them: set names and labels are letters and digits, hosts are addresses).
  await page.route('**/api/v1/interval', async (route) => {
    const body = await (await route.fetch()).json();
    body.interval.talkers[0].host = HOST;
    body.interval.apps[0].app = APP;
    body.interval.flows[0].app = APP;
    body.interval.flows[0].server = HOST;
    body.interval.syn[0].host = HOST;
    await route.fulfill({ json: body });
  });
  await page.route(/\/api\/v1\/filtersets\?/, async (route) => {
    const body = await (await route.fetch()).json();
    body.sets[0].name = SCRIPT;
    body.sets[0].expressions[0].label = IMG;
    body.sets[0].expressions[1].expr = `${SCRIPT} and ${IMG}`;
    await route.fulfill({ json: body });
  });
  await page.route(/\/api\/v1\/anomalies(\?|$)/, async (route) => {
    const body = await (await route.fetch()).json();
    body.active.push({
      id: 999,
      type: 'scan.port',
      event: 'active',
      host: HOST,
      first_seen: 1_700_000_000,
      last_seen: 1_700_000_030,
      targets: 40,
      evidence: { largest_group: 40, destinations: [{ destination: IMG, targets: 40, sample: [{ proto: SCRIPT, port: 1 }] }] },
    });
    await route.fulfill({ json: body });
  });
  async function assertClean(where) {
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
    assert.deepEqual(env.dialogs, [], `${where}: no dialog`);
  }

  await page.goto(`${url}/#/top`);
  await page.reload();
  const top = await waitFor(async () => {
    const host = await page.locator('#top-talkers tbody tr:first-child th').textContent();
    return host === HOST ? host : null;
  }, { what: 'the hostile talker' });
  assert.equal(top, HOST);
  assert.equal(await page.locator('#top-apps tbody tr:first-child th').textContent(), APP);
  assert.ok((await page.locator('#top-flows tbody td', { hasText: APP }).count()) > 0);
  await screenshot(page, 'hostile-top');
  await assertClean('Top-N');

  await page.goto(`${url}/#/filters`);
  await waitFor(async () => (await page.locator('section.filterset h2').first().textContent()) === SCRIPT, { what: 'the hostile set name' });
  const card = page.locator('section.filterset').first();
  assert.equal(await card.locator('[data-label]').first().textContent(), IMG);
  assert.equal(await card.locator('.u-legend .u-series .u-label').nth(1).textContent(), IMG, 'the legend shows the label as text');
  assert.equal(await card.locator('code.expr').nth(1).textContent(), `${SCRIPT} and ${IMG}`);
  await screenshot(page, 'hostile-filters');
  await assertClean('Filters');

  await page.goto(`${url}/#/anomalies`);
  const row = page.locator('#anomalies-active tr.detection[data-id="999"]');
  await row.waitFor();
  assert.equal(await row.locator('th').textContent(), HOST);
  await row.locator('button.expand').click();
  const ev = page.locator('#active-evidence-999 [data-ev="scan_targets"] tbody tr').first();
  assert.equal(await ev.locator('th').textContent(), IMG);
  assert.equal(await ev.locator('td').nth(1).textContent(), `1/${SCRIPT}`);
  await screenshot(page, 'hostile-anomalies');
  await assertClean('Anomalies');
  await page.unrouteAll();
  assert.deepEqual(problems, [], 'no script errors or CSP violations');
});
