// Shared by the browser tests: start a sonde of our own on a free loopback port replaying a
// capture, start Debian's chromium through playwright-core, log in, wait for conditions (never
// fixed sleeps: the VM is slow), and keep screenshots under target/browser-artifacts/.

import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before } from 'node:test';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(here, '..', '..');
export const SONDE = process.env.SONDE ?? path.join(ROOT, 'target', 'release', 'sonde');
/** The shared corpus is beside the repository: ../shared/corpus/ndpi. */
export const CORPUS = path.resolve(ROOT, '..', 'shared', 'corpus', 'ndpi');
export const ARTIFACTS = path.join(ROOT, 'target', 'browser-artifacts');
mkdirSync(ARTIFACTS, { recursive: true });

/** Chromium flags for a headless run with no network of its own (DEPS.md). */
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** A scratch directory, removed by the returned function. */
export function tmpdir(prefix = 'sonde-browser-') {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A free TCP port on 127.0.0.1 (the kernel picks it). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Polls `fn` until it returns a truthy value (returned), or throws after `timeout` ms. */
export async function waitFor(fn, { timeout = 30_000, every = 250, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** `sonde user add NAME --role ROLE --users FILE`, the password on stdin. */
export function addUser(usersFile, name, role, password) {
  const r = spawnSync(SONDE, ['user', 'add', name, '--role', role, '--users', usersFile], { input: `${password}\n`, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`sonde user add ${name}: ${r.stderr}`);
}

/**
 * Starts `sonde -r CAPTURE --replay realtime --http 127.0.0.1:PORT --users FILE` and waits until
 * it answers (`realtime: false`: the capture is read as fast as it goes). On a first start (no
 * user in FILE) sonde prints the generated admin password on stderr: it is returned as
 * `adminPassword`.
 */
export async function startSonde({ capture, usersFile, args = [], realtime = true }) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const argv = ['-r', capture, ...(realtime ? ['--replay', 'realtime'] : []), '--http', `127.0.0.1:${port}`, '--users', usersFile, ...args];
  const proc = spawn(SONDE, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => (stderr += d));
  let exited = null;
  proc.on('exit', (code, signal) => (exited = { code, signal }));
  await waitFor(
    async () => {
      if (exited) throw new Error(`sonde exited (${JSON.stringify(exited)}): ${stderr}`);
      const r = await fetch(`${url}/api/v1/health`);
      return r.ok;
    },
    { timeout: 30_000, what: `sonde on ${url}` },
  );
  // A binary built before console/dist existed serves a 503 at `/`: say so plainly.
  const index = await fetch(`${url}/`);
  if (!index.ok || !(index.headers.get('content-type') ?? '').startsWith('text/html')) {
    proc.kill('SIGKILL');
    throw new Error(`${SONDE} serves no web console at / (${index.status}: ${(await index.text()).trim()}); run 'make console' and rebuild sonde`);
  }
  const m = /password (\S+)/.exec(stderr);
  return {
    url,
    proc,
    adminPassword: m ? m[1] : null,
    stderr: () => stderr,
    async stop() {
      if (exited) return;
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await gone;
      clearTimeout(t);
    },
  };
}

/** A fresh headless chromium (Playwright gives it a new temporary profile). */
export async function startBrowser() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: FLAGS,
    timeout: 60_000,
  });
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  context.setDefaultTimeout(30_000);
  const page = await context.newPage();
  // Browser-side errors show up in the test output: a CSP violation or a crash is a failure.
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    // The console asks /api/v1/me before login: the browser logs that 401 (and a viewer's 403).
    if (m.type() === 'error' && !/status of 40[13]/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return { browser, context, page, problems };
}

/** Logs in through the console's login page and waits for the navigation to appear. */
export async function login(page, url, user, password) {
  if (!page.url().startsWith(url)) await page.goto(`${url}/`);
  await page.getByLabel('User', { exact: true }).fill(user);
  await page.getByLabel('Password', { exact: true }).fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('#nav a[data-view="dashboard"]').waitFor();
}

/** GET from inside the page (with its session cookie): status and JSON body. */
export function pageFetch(page, p) {
  return page.evaluate(async (p) => {
    const r = await fetch(p);
    let body = null;
    try {
      body = await r.json();
    } catch {
      // no JSON body
    }
    return { status: r.status, body };
  }, p);
}

/** The screenshots the README shows (docs/screenshots/), rewritten by the tests that take them
 * when SONDE_DOC_SCREENSHOTS=1 (`make screenshots`), so they show the console as it is. */
export const DOC_SCREENSHOTS = new Set([
  'firstrun-dashboard',
  'firstrun-history',
  'geo-dashboard',
  'geo-hosts',
  'tcp-host',
  'localnet-dashboard',
  'localnet-flows',
  'anomalies',
  'top',
]);
export const DOCS = path.join(ROOT, 'docs', 'screenshots');

export async function screenshot(page, name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
  if (process.env.SONDE_DOC_SCREENSHOTS === '1' && DOC_SCREENSHOTS.has(name)) {
    mkdirSync(DOCS, { recursive: true });
    await page.screenshot({ path: path.join(DOCS, `${name}.png`), fullPage: true });
  }
}

/** Packets in a capture, from capinfos. */
export function capinfosPackets(file) {
  const r = spawnSync('capinfos', ['-c', '-M', file], { encoding: 'utf8' });
  const m = /Number of packets:\s*(\d+)/.exec(r.stdout);
  if (!m) throw new Error(`capinfos ${file}: ${r.stderr}`);
  return Number(m[1]);
}

/** tshark's IPv4 endpoints: address → {txPackets, rxPackets, packets}. */
export function tsharkEndpoints(file) {
  const r = spawnSync('tshark', ['-r', file, '-q', '-n', '-z', 'endpoints,ip'], { encoding: 'utf8' });
  const out = new Map();
  for (const line of r.stdout.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 7 && /^\d+\.\d+\.\d+\.\d+$/.test(f[0])) {
      out.set(f[0], { packets: Number(f[1]), txPackets: Number(f[3]), rxPackets: Number(f[5]) });
    }
  }
  if (out.size === 0) throw new Error(`tshark endpoints of ${file}: nothing read (${r.stderr})`);
  return out;
}

/**
 * The usual setup of a test file: a temporary directory, a sonde replaying `capture` with a
 * users file in it, and a browser; all started before the file's tests and stopped after them.
 * Returns an object whose `sonde`, `b` and `tmp` are filled in by then. `realtime: false` reads
 * the capture at once (its flows and hosts then stay as they ended, for checks of settled values).
 */
export function useSondeAndBrowser(capture, args = [], { realtime = true } = {}) {
  const env = {};
  before(async () => {
    env.tmp = tmpdir();
    env.sonde = await startSonde({ capture, usersFile: path.join(env.tmp.dir, 'users'), args, realtime });
    env.b = await startBrowser();
  });
  after(async () => {
    await env.b?.browser.close();
    await env.sonde?.stop();
    env.tmp?.remove();
  });
  return env;
}
