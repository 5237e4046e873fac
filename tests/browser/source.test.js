// Static checks of the console, no browser needed: its sources never turn strings into markup or
// code, and the built page has no inline script (the server's CSP would block it).

import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { ROOT } from './lib.js';

const SRC = path.join(ROOT, 'console', 'src');
const DIST = path.join(ROOT, 'console', 'dist');

function files(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = path.join(dir, n);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

test('console sources use no HTML or code sinks', () => {
  const sinks = /\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|\beval\s*\(|new\s+Function\s*\(|setTimeout\s*\(\s*['"`]|createContextualFragment|DOMParser/;
  const found = [];
  for (const f of files(SRC).filter((f) => /\.(ts|js)$/.test(f))) {
    readFileSync(f, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (!/^\s*(\/\/|\*)/.test(line) && sinks.test(line)) found.push(`${path.relative(ROOT, f)}:${i + 1}: ${line.trim()}`);
      });
  }
  assert.deepEqual(found, []);
});

test('the built console has no inline script and only local assets', { skip: !existsSync(path.join(DIST, 'index.html')) && 'console/dist not built (make console)' }, () => {
  const html = readFileSync(path.join(DIST, 'index.html'), 'utf8');
  const scripts = [...html.matchAll(/<script\b[^>]*>/g)].map((m) => m[0]);
  assert.ok(scripts.length > 0);
  for (const s of scripts) assert.match(s, /\bsrc="\/assets\/[^"]+\.js"/, `external module script only: ${s}`);
  assert.doesNotMatch(html, /\son[a-z]+\s*=/i, 'no inline event handlers');
  assert.doesNotMatch(html, /(src|href)="(https?:)?\/\//, 'nothing from another origin');
  const js = files(path.join(DIST, 'assets')).filter((f) => f.endsWith('.js'));
  for (const f of js) assert.doesNotMatch(readFileSync(f, 'utf8'), /\beval\(|new Function\(/, `${path.basename(f)}: no eval`);
});
