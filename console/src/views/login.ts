// The login page. The session is an HttpOnly cookie set by the server: the console never sees
// or stores it, it only learns who is logged in (GET /api/v1/me).

import { api, ApiError, type Me } from '../api';
import { el } from '../dom';

export function login(root: HTMLElement, onDone: (me: Me) => void): void {
  const user = el('input', { id: 'login-user', name: 'user', type: 'text', autocomplete: 'username', required: true, autocapitalize: 'none', spellcheck: 'false' });
  const password = el('input', { id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const submit = el('button', { type: 'submit' }, 'Log in');
  const error = el('p', { class: 'error', role: 'alert', id: 'login-error' });
  const form = el(
    'form',
    { class: 'login', 'aria-labelledby': 'login-title' },
    el('h1', { id: 'login-title' }, 'Log in to sonde'),
    el('div', { class: 'field' }, el('label', { for: user.id }, 'User'), user),
    el('div', { class: 'field' }, el('label', { for: password.id }, 'Password'), password),
    error,
    submit,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    submit.disabled = true;
    try {
      onDone(await api.login(user.value, password.value));
    } catch (err) {
      // 401: wrong name or password; 429: too many failures (the server says how long to wait).
      error.textContent = err instanceof ApiError && err.status === 401 ? 'Wrong user name or password.' : (err as Error).message;
      password.value = '';
      password.focus();
    } finally {
      submit.disabled = false;
    }
  });
  root.append(form);
  user.focus();
}
