// Users and API tokens (admin only: the server answers 403 to a viewer, and the console does
// not show this page to one). A new token is shown once, here, and never again.

import { api, ApiError, type Accounts } from '../api';
import { card, el, heading, replace } from '../dom';
import { table } from '../table';
import type { View } from './view';

type Entry = { name: string; role: string };

function roleSelect(id: string): HTMLSelectElement {
  return el('select', { id, name: 'role' }, el('option', { value: 'viewer' }, 'viewer'), el('option', { value: 'admin' }, 'admin'));
}

export const users: View = (root, _route, ctx) => {
  if (ctx.me.role !== 'admin') {
    root.append(heading('Users'), el('p', { class: 'error', role: 'alert' }, 'This page needs the admin role.'));
    return;
  }
  const message = el('p', { class: 'message', role: 'status' });
  const error = el('p', { class: 'error', role: 'alert' });
  const fail = (e: unknown) => {
    message.textContent = '';
    error.textContent = e instanceof ApiError ? e.message : String(e);
  };
  const done = (text: string) => {
    error.textContent = '';
    message.textContent = text;
  };

  const del = (kind: 'user' | 'token', e: Entry) => {
    const b = el('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${kind} ${e.name}` }, 'Delete');
    b.addEventListener('click', async () => {
      if (!confirm(`Delete ${kind} ${e.name}?`)) return;
      try {
        await (kind === 'user' ? api.deleteUser(e.name) : api.deleteToken(e.name));
        done(`Deleted ${kind} ${e.name}.`);
        await load();
      } catch (err) {
        fail(err);
      }
    });
    return b;
  };
  const usersT = table<Entry>({
    caption: 'Users',
    hideCaption: true,
    columns: [
      { label: 'Name', rowHeader: true, cell: (e) => e.name },
      { label: 'Role', cell: (e) => e.role },
      { label: 'Actions', cell: (e) => del('user', e) },
    ],
    empty: 'No users.',
  });
  const tokensT = table<Entry>({
    caption: 'API tokens',
    hideCaption: true,
    columns: [
      { label: 'Name', rowHeader: true, cell: (e) => e.name },
      { label: 'Role', cell: (e) => e.role },
      { label: 'Actions', cell: (e) => del('token', e) },
    ],
    empty: 'No tokens.',
  });

  // Add (or replace) a user.
  const uName = el('input', { id: 'new-user-name', name: 'name', required: true, autocomplete: 'off', pattern: '[A-Za-z0-9._@-]{1,64}' });
  const uPass = el('input', { id: 'new-user-password', name: 'password', type: 'password', required: true, autocomplete: 'new-password' });
  const uRole = roleSelect('new-user-role');
  const addUser = el(
    'form',
    { class: 'filters', 'aria-label': 'Add a user' },
    el('div', { class: 'field' }, el('label', { for: uName.id }, 'Name'), uName),
    el('div', { class: 'field' }, el('label', { for: uPass.id }, 'Password'), uPass),
    el('div', { class: 'field' }, el('label', { for: uRole.id }, 'Role'), uRole),
    el('button', { type: 'submit' }, 'Add user'),
  );
  addUser.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const r = await api.addUser(uName.value.trim(), uRole.value, uPass.value);
      done(`Saved user ${r.name} (${r.role}).`);
      addUser.reset();
      await load();
    } catch (err) {
      fail(err);
    }
  });

  // Create a token; it is shown once.
  const tName = el('input', { id: 'new-token-name', name: 'name', required: true, autocomplete: 'off', pattern: '[A-Za-z0-9._@-]{1,64}' });
  const tRole = roleSelect('new-token-role');
  const tokenOut = el('div', { class: 'token-out' });
  const addToken = el(
    'form',
    { class: 'filters', 'aria-label': 'Create an API token' },
    el('div', { class: 'field' }, el('label', { for: tName.id }, 'Name'), tName),
    el('div', { class: 'field' }, el('label', { for: tRole.id }, 'Role'), tRole),
    el('button', { type: 'submit' }, 'Create token'),
  );
  addToken.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const r = await api.addToken(tName.value.trim(), tRole.value);
      done(`Created token ${r.name} (${r.role}).`);
      replace(
        tokenOut,
        el('p', {}, 'Copy it now: it is not shown again. Scripts send it as ', el('code', {}, 'Authorization: Bearer TOKEN'), '.'),
        el('output', { id: 'new-token', class: 'token', for: tName.id }, r.token),
      );
      addToken.reset();
      await load();
    } catch (err) {
      fail(err);
    }
  });

  root.append(
    heading('Users'),
    message,
    error,
    el('div', { class: 'grid' }, card('Users', usersT.el, addUser), card('API tokens', tokensT.el, addToken, tokenOut)),
  );

  async function load() {
    const a: Accounts = await api.accounts();
    usersT.update(a.users);
    tokensT.update(a.tokens);
  }
  load().catch(fail);
};
