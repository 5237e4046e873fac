// A host's live chart is drawn in the traffic's own time: a capture from 2017 replayed in real
// time gives points in 2017, as the dashboard and the series on disk have them, not today's
// wall clock.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { CORPUS, login, pageFetch, useSondeAndBrowser, waitFor } from './lib.js';

// 90 s of steady traffic (1,793 packets), recorded in January 2017.
const CAPTURE = path.join(CORPUS, 'netflix.pcap');

const env = useSondeAndBrowser(CAPTURE);

test("a host's live chart uses the traffic's clock", { timeout: 120_000 }, async () => {
  const { page, problems } = env.b;
  const r = spawnSync('capinfos', ['-a', '-e', '-S', '-T', '-r', CAPTURE], { encoding: 'utf8' });
  const [first, last] = r.stdout.trim().split('\t').slice(1).map(Number);
  assert.ok(first > 0 && last > first, `capinfos: ${r.stdout} ${r.stderr}`);

  await page.goto(`${env.sonde.url}/#/hosts`);
  await login(page, env.sonde.url, 'admin', env.sonde.adminPassword);
  const hosts = (await pageFetch(page, '/api/v1/hosts?sort=bytes&order=desc&limit=1')).body.hosts;
  assert.ok(hosts.length === 1, 'a host');
  await page.goto(`${env.sonde.url}/#/host/${hosts[0].ip}`);
  const state = () =>
    page.evaluate(() => {
      const f = document.querySelector('.card.wide .chart');
      return { points: Number(f?.dataset.points ?? 0), newest: Number(f?.dataset.newest ?? 0) };
    });
  await waitFor(async () => (await state()).points >= 2, { timeout: 30_000, every: 500, what: 'two live points on the host chart' });
  const s = await state();
  assert.ok(s.newest >= first && s.newest <= last + 5, `newest point at ${s.newest}, the capture runs ${first}..${last}`);
  assert.deepEqual(problems, []);
});
