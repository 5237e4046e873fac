// The Alerts page: alerts whose entity and summary are attacker data (a script raises one per
// name the hostile capture's client asked for: SNI, HTTP Host, DNS query) are shown as text and
// nothing runs; the host.listed check raises an alert for the client; an admin excludes it with
// the Exclude button and it is released at once and listed under Exclusions; a viewer sees no
// Ack or Exclude button.

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { CLIENT, IMG, SCRIPT, writeHostilePcap } from './hostile-pcap.js';
import { addUser, login, pageFetch, screenshot, startBrowser, startSonde, tmpdir, waitFor } from './lib.js';

const SCRIPT_LUA = `
function every_second(now)
  for _, f in ipairs(sonde.flows()) do
    local name = f.server_name or f.dns_query
    if name then
      sonde.alert{type = "named", entity = name, entity_kind = "flow", severity = "notice",
                  summary = f.client .. " asked for " .. name, evidence = {client = f.client}}
    end
  end
end
`;

let sonde, b, tmp;
const dialogs = [];
before(async () => {
  tmp = tmpdir();
  const capture = path.join(tmp.dir, 'hostile.pcap');
  writeHostilePcap(capture);
  const lua = path.join(tmp.dir, 'named.lua');
  writeFileSync(lua, SCRIPT_LUA);
  const listed = path.join(tmp.dir, 'listed.txt');
  writeFileSync(listed, `${CLIENT}\n`);
  const users = path.join(tmp.dir, 'users');
  addUser(users, 'root', 'admin', 'root password 1');
  addUser(users, 'vera', 'viewer', 'viewer password 1');
  sonde = await startSonde({ capture, usersFile: users, args: ['--script', lua, '--alert-hosts', listed, '--data-dir', path.join(tmp.dir, 'data')] });
  b = await startBrowser();
  b.page.on('dialog', (d) => {
    dialogs.push(d.message());
    void (d.type() === 'confirm' ? d.accept() : d.dismiss());
  });
});
after(async () => {
  await b?.browser.close();
  await sonde?.stop();
  tmp?.remove();
});

test('alerts from wire strings are text; an admin excludes one and it is released at once', { timeout: 150_000 }, async () => {
  const { page, problems } = b;
  await page.goto(`${sonde.url}/#/alerts`);
  await login(page, sonde.url, 'root', 'root password 1');
  await page.goto(`${sonde.url}/#/alerts`);

  // The premise: the API holds a script alert whose entity carries markup, and host.listed.
  const api = await waitFor(
    async () => {
      const r = await pageFetch(page, '/api/v1/alerts?limit=100');
      const all = r.body?.alerts ?? [];
      const named = all.filter((a) => a.type === 'script.named' && a.entity.value.includes('<script>'));
      const listed = all.find((a) => a.type === 'host.listed' && a.host === CLIENT && a.state === 'engaged');
      return named.length > 0 && listed ? { named, listed } : null;
    },
    { timeout: 60_000, what: 'a script alert named after a hostile string, and host.listed for the client' },
  );

  const table = page.locator('section[aria-labelledby="card-all-alerts"] table.data tbody');
  await waitFor(async () => ((await table.locator('tr').count()) >= 2 ? true : null), { what: 'rows in the alerts table' });
  const shown = await table.allTextContents();
  assert.ok(shown.join('\n').includes(SCRIPT), 'the <script> string is shown as text');
  assert.ok(api.named.some((a) => a.entity.value.includes(IMG)) ? shown.join('\n').includes(IMG) : true, 'the <img> string is shown as text');
  const clean = await page.evaluate(() => ({
    pwned: typeof window.__pwned,
    imgs: document.querySelectorAll('img, svg, iframe, object, embed').length,
    handlers: [...document.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length,
  }));
  assert.deepEqual(clean, { pwned: 'undefined', imgs: 0, handlers: 0 });
  await screenshot(page, 'alerts-page');

  // Exclude the host.listed alert from its row: released at once, listed under Exclusions.
  const engaged = page.locator('section[aria-labelledby="card-engaged"] table.data tbody tr', { hasText: 'host.listed' });
  await engaged.first().getByRole('button', { name: /^Exclude host\.listed alerts for/ }).click();
  await waitFor(async () => {
    const r = await pageFetch(page, `/api/v1/alerts?type=host.listed&entity=${CLIENT}`);
    const a = (r.body?.alerts ?? []).find((x) => x.id === api.listed.id);
    return a && a.state === 'released' && /^exclusion \d+$/.test(a.released_by ?? '') ? a : null;
  }, { timeout: 10_000, what: 'the excluded alert released' });
  await waitFor(async () => ((await page.locator('#exclusions tbody tr', { hasText: CLIENT }).count()) === 1 ? true : null), {
    what: 'the exclusion listed',
  });
  assert.ok(dialogs.some((d) => d.includes('host.listed')), `the confirm dialog named the alert: ${dialogs}`);
  await screenshot(page, 'alerts-excluded');
  assert.deepEqual(problems, []);
});

test('a viewer sees alerts but no Ack or Exclude button', { timeout: 120_000 }, async () => {
  const context = await b.browser.newContext();
  const page = await context.newPage();
  await page.goto(`${sonde.url}/#/alerts`);
  await login(page, sonde.url, 'vera', 'viewer password 1');
  await page.goto(`${sonde.url}/#/alerts`);
  const rows = page.locator('section[aria-labelledby="card-all-alerts"] table.data tbody tr');
  await waitFor(async () => ((await rows.count()) >= 1 && !(await rows.first().textContent()).includes('No alert') ? true : null), { what: 'alerts for the viewer' });
  assert.equal(await page.locator('button[data-action="ack"], button[data-action="exclude"]').count(), 0);
  const r = await page.evaluate(async () => (await fetch('/api/v1/admin/alerts/exclusions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"host":"10.0.0.1"}' })).status);
  assert.equal(r, 403);
  await context.close();
});
