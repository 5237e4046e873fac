"""Logins (`--users`), sessions, API tokens, roles and TLS (`--https-cert/--https-key`) of the
web console and REST API, against a real sonde on 127.0.0.1."""

from __future__ import annotations

import http.client
import collections
import json
import os
import re
import signal
import ssl
import stat
import subprocess
import time

import pytest

from conftest import free_port




class Client:
    """A tiny HTTP client that keeps the session cookie, like a browser tab."""

    def __init__(self, port, tls_ca=None):
        self.port, self.tls_ca, self.cookie, self.last_set_cookie = port, tls_ca, None, None

    def request(self, method, path, body=None, headers=None):
        if self.tls_ca:
            ctx = ssl.create_default_context(cafile=self.tls_ca)
            c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=20, context=ctx)
        else:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        h = dict(headers or {})
        if self.cookie:
            h["Cookie"] = self.cookie
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode()
        self.last_headers = r.msg
        sc = r.getheader("Set-Cookie")
        if sc:
            self.last_set_cookie = sc
            value = sc.split(";")[0]
            self.cookie = None if value.endswith("=") else value
        c.close()
        return r.status, (json.loads(text) if text and text[0] in "{[" else text)

    def login(self, user, password):
        return self.request("POST", "/api/v1/login", {"user": user, "password": password})


def _start(sonde_bin, corpus, args, users=None):
    port = free_port()
    cmd = [str(sonde_bin), "-r", str(corpus / "http_connect.pcap"), "--http", f"127.0.0.1:{port}",
           "--duration", "60", "-q", *args]
    if users is not None:
        cmd += ["--users", str(users)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, port


def _wait_up(proc, port, tls_ca=None):
    deadline = time.time() + 20
    while True:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if Client(port, tls_ca).request("GET", "/api/v1/health")[0] == 200:
                return
        except (ConnectionError, OSError, ssl.SSLError):
            pass
        assert time.time() < deadline, "sonde's server never answered"
        time.sleep(0.1)


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return err


def _add_user(sonde_bin, users, name, role, password):
    p = subprocess.run([str(sonde_bin), "user", "add", name, "--role", role, "--users", str(users)],
                       input=password + "\n", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


@pytest.fixture
def need_corpus(corpus):
    if not (corpus / "http_connect.pcap").exists():
        pytest.skip("http_connect.pcap not in the corpus")
    return corpus


def test_first_start_creates_an_admin_and_prints_its_password_once(sonde_bin, need_corpus, workdir):
    users = workdir / "conf" / "users"
    proc, port = _start(sonde_bin, need_corpus, [], users)
    _wait_up(proc, port)
    # The password is only in the first start's output, and the file keeps only its argon2 hash.
    c = Client(port)
    status, _ = c.request("GET", "/api/v1/hosts")
    assert status == 401
    err = _stop(proc)
    m = re.search(r'created user "admin" with password (\S+)', err)
    assert m, err
    password = m.group(1)
    text = users.read_text()
    assert password not in text and "$argon2id$" in text
    assert stat.S_IMODE(os.stat(users).st_mode) == 0o600
    proc, port = _start(sonde_bin, need_corpus, [], users)
    _wait_up(proc, port)
    c = Client(port)
    assert c.login("admin", password)[0] == 200
    status, me = c.request("GET", "/api/v1/me")
    assert status == 200 and me == {"user": "admin", "role": "admin", "auth": True}
    err = _stop(proc)
    assert "password" not in err


def test_login_sessions_roles_tokens_and_logout(sonde_bin, need_corpus, workdir):
    users = workdir / "users"
    _add_user(sonde_bin, users, "root", "admin", "admin password 1")
    _add_user(sonde_bin, users, "vera", "viewer", "viewer password 1")
    tok = subprocess.run([str(sonde_bin), "user", "token", "grafana", "--role", "viewer",
                          "--users", str(users)], capture_output=True, text=True, timeout=30)
    assert tok.returncode == 0, tok.stderr
    token = tok.stdout.strip()
    assert token.startswith("sonde_") and token not in users.read_text()
    proc, port = _start(sonde_bin, need_corpus, [], users)
    try:
        _wait_up(proc, port)
        anon = Client(port)
        # Without a session: health and login only; the console's page itself loads.
        assert anon.request("GET", "/api/v1/health")[0] == 200
        for path in ("/api/v1/hosts", "/api/v1/flows", "/api/v1/interface", "/metrics",
                     "/api/v1/me", "/api/v1/admin/users", "/api/v1/nonexistent"):
            status, body = anon.request("GET", path)
            assert status == 401, (path, status)
        assert anon.request("GET", "/")[0] in (200, 503)  # 503: binary built without the console

        # Wrong password and unknown user read the same.
        s1, b1 = anon.login("vera", "wrong password")
        s2, b2 = anon.login("nobody", "wrong password")
        assert (s1, s2) == (401, 401) and b1 == b2 and anon.cookie is None

        # A viewer reads everything but the admin API.
        viewer = Client(port)
        status, me = viewer.login("vera", "viewer password 1")
        assert status == 200 and me["role"] == "viewer"
        sc = viewer.last_set_cookie
        assert "HttpOnly" in sc and "SameSite=Strict" in sc and "Secure" not in sc, sc
        # No cache keeps a login's answer; no HSTS on plain HTTP.
        assert viewer.last_headers["Cache-Control"] == "no-store"
        assert viewer.last_headers["Strict-Transport-Security"] is None
        assert viewer.request("GET", "/api/v1/hosts")[0] == 200
        assert viewer.request("GET", "/api/v1/admin/users")[0] == 403
        assert viewer.request("POST", "/api/v1/admin/users",
                              {"name": "eve", "role": "admin", "password": "x" * 12})[0] == 403

        # An admin manages users; a new user can log in at once, a deleted one is logged out.
        admin = Client(port)
        assert admin.login("root", "admin password 1")[0] == 200
        status, listed = admin.request("GET", "/api/v1/admin/users")
        assert status == 200
        assert {u["name"]: u["role"] for u in listed["users"]} == {"root": "admin", "vera": "viewer"}
        assert listed["tokens"] == [{"name": "grafana", "role": "viewer"}]
        assert "argon2" not in json.dumps(listed)
        assert admin.request("POST", "/api/v1/admin/users",
                             {"name": "bob", "role": "viewer", "password": "short"})[0] == 400
        assert admin.request("POST", "/api/v1/admin/users",
                             {"name": "bob", "role": "viewer", "password": "bob password"})[0] == 201
        bob = Client(port)
        assert bob.login("bob", "bob password")[0] == 200
        assert admin.request("DELETE", "/api/v1/admin/users/bob")[0] == 204
        assert bob.request("GET", "/api/v1/hosts")[0] == 401
        assert "bob" not in users.read_text()
        # The last admin stays: neither deleted nor demoted (issue 19, item 6).
        assert admin.request("DELETE", "/api/v1/admin/users/root")[0] == 409
        status, body = admin.request("POST", "/api/v1/admin/users",
                                     {"name": "root", "role": "viewer", "password": "r" * 12})
        assert status == 409 and "last admin" in body["error"], (status, body)
        assert "user root admin" in users.read_text()
        # A cookie-carried change from another origin is refused.
        status, _ = admin.request("POST", "/api/v1/admin/users",
                                  {"name": "mallory", "role": "admin", "password": "m" * 12},
                                  headers={"Origin": "http://evil.example"})
        assert status == 403 and "mallory" not in users.read_text()

        # Tokens: scripts and Prometheus, with the token's role.
        bearer = {"Authorization": f"Bearer {token}"}
        assert anon.request("GET", "/metrics", headers=bearer)[0] == 200
        assert anon.request("GET", "/api/v1/hosts", headers=bearer)[0] == 200
        assert anon.request("GET", "/api/v1/admin/users", headers=bearer)[0] == 403
        assert anon.request("GET", "/api/v1/hosts",
                            headers={"Authorization": "Bearer sonde_" + "0" * 64})[0] == 401
        status, made = admin.request("POST", "/api/v1/admin/tokens", {"name": "ci", "role": "admin"})
        assert status == 201 and made["token"].startswith("sonde_")
        assert anon.request("GET", "/api/v1/admin/users",
                            headers={"Authorization": f"Bearer {made['token']}"})[0] == 200

        # Logout ends the session on the server, not only in the browser.
        old = viewer.cookie
        assert viewer.request("POST", "/api/v1/logout")[0] == 204
        assert viewer.cookie is None
        viewer.cookie = old
        assert viewer.request("GET", "/api/v1/hosts")[0] == 401
    finally:
        _stop(proc)


def test_failed_logins_lock_the_address_out(sonde_bin, need_corpus, workdir):
    users = workdir / "users"
    _add_user(sonde_bin, users, "root", "admin", "admin password 1")
    proc, port = _start(sonde_bin, need_corpus, [], users)
    try:
        _wait_up(proc, port)
        c = Client(port)
        codes = [c.login("root", f"guess {i}")[0] for i in range(6)]
        assert codes == [401] * 5 + [429], codes
        # Locked out even with the right password, until the lockout passes.
        status, body = c.login("root", "admin password 1")
        assert status == 429 and "wait" in body["error"]
    finally:
        _stop(proc)


def _login_from(port, source, user, password):
    """POST /api/v1/login from a chosen loopback source address: (status, JSON body, the
    session cookie or "")."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
    c.request("POST", "/api/v1/login", body=json.dumps({"user": user, "password": password}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    cookie = (r.getheader("Set-Cookie") or "").split(";")[0]
    return r.status, (json.loads(text) if text.startswith("{") else text), cookie


def _peak_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_burst_of_wrong_logins_is_refused_before_hashing(sonde_bin, need_corpus, workdir):
    """80 concurrent wrong logins for root from one address: at most 5 are checked (the
    attempts are counted before the slow hash), the rest are refused at once, memory stays
    bounded, and root logs in from another address meanwhile; /metrics counts every refusal."""
    import concurrent.futures
    users = workdir / "users"
    _add_user(sonde_bin, users, "root", "admin", "admin password 1")
    proc, port = _start(sonde_bin, need_corpus, [], users)
    try:
        _wait_up(proc, port)
        with concurrent.futures.ThreadPoolExecutor(max_workers=80) as pool:
            burst = [pool.submit(_login_from, port, "127.0.0.1", "root", f"guess {i}")
                     for i in range(80)]
            # The admin, elsewhere, is not locked out by the stranger's burst.
            status, body, cookie = _login_from(port, "127.0.0.2", "root", "admin password 1")
            assert status in (200, 503), (status, body)
            if status == 503:  # every hash slot was taken at that instant: try again
                time.sleep(1.0)
                status, body, cookie = _login_from(port, "127.0.0.2", "root",
                                                   "admin password 1")
            assert status == 200 and body["role"] == "admin", (status, body)
            codes = collections.Counter(f.result()[0] for f in burst)
        assert codes[401] <= 5 and codes[200] == 0, codes
        assert codes[429] + codes[503] >= 75, codes
        assert _peak_rss_mib(proc.pid) < 300, _peak_rss_mib(proc.pid)
        c = Client(port)
        c.cookie = cookie
        status, text = c.request("GET", "/metrics")
        assert status == 200
        m = dict(re.findall(r'^sonde_logins_total\{outcome="(\w+)"\} (\d+)$', text, re.M))
        assert int(m["throttled"]) == codes[429] and int(m["busy"]) >= codes[503], (m, codes)
        assert int(m["failed"]) == codes[401] and int(m["ok"]) >= 1, m
    finally:
        _stop(proc)


def test_bad_users_file_and_contradictory_flags_are_named(sonde_bin, sonde, need_corpus, workdir):
    users = workdir / "users"
    _add_user(sonde_bin, users, "root", "admin", "admin password 1")
    good = [line for line in users.read_text().splitlines() if line.startswith("user")]
    users.write_text(good[0] + "\nuser eve superuser $argon2id$x\n")
    pcap = need_corpus / "http_connect.pcap"
    p = sonde("-r", pcap, "--http", f"127.0.0.1:{free_port()}", "--users", users)
    assert p.returncode != 0 and "line 2" in p.stderr and "superuser" in p.stderr, p.stderr
    p = sonde("-r", pcap, "--http", f"127.0.0.1:{free_port()}", "--users", users, "--no-auth")
    assert p.returncode != 0 and "--no-auth" in p.stderr, p.stderr
    p = sonde("-r", pcap, "--http", f"127.0.0.1:{free_port()}", "--https-cert", users)
    assert p.returncode != 0 and "--https-key" in p.stderr, p.stderr


def test_https_serves_tls_and_marks_cookies_secure(sonde_bin, sonde, need_corpus, workdir):
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    gen = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                          "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                          "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                          "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True)
    if gen.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {gen.stderr}")
    users = workdir / "users"
    _add_user(sonde_bin, users, "root", "admin", "admin password 1")
    proc, port = _start(sonde_bin, need_corpus, ["--https-cert", str(cert), "--https-key", str(key)],
                        users)
    try:
        _wait_up(proc, port, tls_ca=str(cert))
        c = Client(port, tls_ca=str(cert))
        assert c.login("root", "admin password 1")[0] == 200
        assert "Secure" in c.last_set_cookie and "HttpOnly" in c.last_set_cookie
        assert c.last_headers["Strict-Transport-Security"] == "max-age=31536000"
        status, hosts = c.request("GET", "/api/v1/hosts?limit=5")
        assert status == 200 and hosts["total"] > 0
        # Plain HTTP on the TLS port gets no answer, and the server keeps serving TLS after it.
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            Client(port).request("GET", "/api/v1/health")
        assert Client(port, tls_ca=str(cert)).request("GET", "/api/v1/health")[0] == 200
    finally:
        _stop(proc)
    # A file that is not a certificate is named.
    p = sonde("-r", need_corpus / "http_connect.pcap", "--http", f"127.0.0.1:{free_port()}",
              "--users", users, "--https-cert", users, "--https-key", key)
    assert p.returncode != 0 and "--https-cert" in p.stderr, p.stderr


def test_no_auth_answers_only_loopback_host_names(sonde_bin, need_corpus, workdir):
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends
    `Host: evil.example`; without logins that must get nothing."""
    proc, port = _start(sonde_bin, need_corpus, ["--no-auth"])
    try:
        _wait_up(proc, port)
        c = Client(port)
        for host, want in ((f"evil.example:{port}", 403), ("evil.example", 403),
                           (f"127.0.0.1.nip.io:{port}", 403), (f"localhost:{port}", 200),
                           (f"127.0.0.1:{port}", 200), (f"[::1]:{port}", 200)):
            status, body = c.request("GET", "/api/v1/hosts", headers={"Host": host})
            assert status == want, (host, status, body)
            if want == 403:
                assert "--no-auth" in body["error"] and "loopback" in body["error"]
        # The console's page itself is refused too (its script would read the API).
        status, _ = c.request("GET", "/", headers={"Host": "evil.example"})
        assert status == 403
    finally:
        _stop(proc)


def test_idle_and_silent_connections_do_not_hold_up_requests(sonde_bin, need_corpus, workdir):
    """300 connections from one address that never send a byte (plain HTTP) or never start a
    TLS handshake (HTTPS): a request from another address is answered within a second, and the
    refused handshakes are counted (issue 19, item 2)."""
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    gen = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                          "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                          "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                          "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    import socket
    for tls in (False, True):
        args = ["--no-auth"] if not tls else ["--https-cert", str(cert), "--https-key", str(key)]
        users = None
        if tls:
            users = workdir / "users"
            _add_user(sonde_bin, users, "root", "admin", "admin password 1")
        proc, port = _start(sonde_bin, need_corpus, args, users)
        socks = []
        try:
            _wait_up(proc, port, tls_ca=str(cert) if tls else None)
            for _ in range(300):
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.5)
            t = time.time()
            if tls:
                ctx = ssl.create_default_context(cafile=str(cert))
                c = http.client.HTTPSConnection("127.0.0.1", port, timeout=20, context=ctx,
                                                source_address=("127.0.0.2", 0))
            else:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=20,
                                               source_address=("127.0.0.2", 0))
            c.request("GET", "/api/v1/health")
            r = c.getresponse()
            r.read()
            took = time.time() - t
            # Not a speed figure: before the fix this request waited out the handshake timeout
            # (9.6 s); a generous bound keeps a busy CI machine from failing it.
            assert r.status == 200 and took < 3.0, (tls, r.status, took)
            if not tls:
                # One client holds at most 128 connections: the rest were closed and counted.
                c.request("GET", "/metrics")
                text = c.getresponse().read().decode()
                m = re.search(r"^sonde_http_refused_connections_total (\d+)$", text, re.M)
                assert m and int(m.group(1)) >= 300 - 128, text[-600:]
            if tls:
                # Once the silent sockets go, their address is served again.
                for sock in socks:
                    sock.close()
                socks = []
                time.sleep(0.5)
                root = Client(port, tls_ca=str(cert))
                assert root.login("root", "admin password 1")[0] == 200
                status, text = root.request("GET", "/metrics")
                m = re.search(r"^sonde_https_refused_handshakes_total (\d+)$", text, re.M)
                assert m and int(m.group(1)) >= 300 - 16, text[-500:]
        finally:
            for s in socks:
                s.close()
            _stop(proc)


def test_users_file_changes_take_effect_and_deleted_entries_stay_deleted(sonde_bin, need_corpus,
                                                                         workdir):
    """`sonde user del`/`del-token` on a running server: the user and the token are refused
    at once (their session too), a user added with the CLI logs in without a restart, and a
    later change made in the console does not write the deleted ones back (issue 19, item 3)."""
    users = workdir / "users"
    _add_user(sonde_bin, users, "root", "admin", "admin password 1")
    _add_user(sonde_bin, users, "bob", "viewer", "bob password 12")
    tok = subprocess.run([str(sonde_bin), "user", "token", "grafana", "--role", "viewer",
                          "--users", str(users)], capture_output=True, text=True, timeout=30)
    token = tok.stdout.strip()
    proc, port = _start(sonde_bin, need_corpus, [], users)
    try:
        _wait_up(proc, port)
        bob, admin = Client(port), Client(port)
        assert bob.login("bob", "bob password 12")[0] == 200
        assert admin.login("root", "admin password 1")[0] == 200
        bearer = {"Authorization": f"Bearer {token}"}
        assert Client(port).request("GET", "/api/v1/hosts", headers=bearer)[0] == 200
        for args in (["del", "bob"], ["del-token", "grafana"]):
            p = subprocess.run([str(sonde_bin), "user", *args, "--users", str(users)],
                               capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, p.stderr
        _add_user(sonde_bin, users, "carol", "viewer", "carol password 1")
        time.sleep(0.7)  # the server looks at the file at most twice a second
        assert bob.request("GET", "/api/v1/hosts")[0] == 401, "bob's session ended"
        assert Client(port).login("bob", "bob password 12")[0] == 401
        assert Client(port).request("GET", "/api/v1/hosts", headers=bearer)[0] == 401
        assert Client(port).login("carol", "carol password 1")[0] == 200
        # A console change afterwards keeps the file as the CLI left it, plus the change.
        status, _ = admin.request("POST", "/api/v1/admin/users",
                                  {"name": "dave", "role": "viewer", "password": "d" * 12})
        assert status == 201
        text = users.read_text()
        assert "user bob " not in text and "token grafana " not in text, text
        assert "user carol " in text and "user dave " in text and "user root " in text, text
    finally:
        _stop(proc)


def test_user_add_on_a_terminal_does_not_show_the_password(sonde_bin, workdir):
    """`sonde user add` typed at a terminal: the password is not echoed (issue 19, item 6)."""
    import pty
    users = workdir / "users"
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(sonde_bin), [str(sonde_bin), "user", "add", "eve", "--role", "viewer",
                                  "--users", str(users)])
    seen = b""
    deadline = time.time() + 20
    while b"password" not in seen and time.time() < deadline:
        seen += os.read(fd, 1024)
    os.write(fd, b"secret password 42\n")
    while time.time() < deadline:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert b"secret password 42" not in seen, seen
    assert "user eve viewer" in users.read_text()


def test_event_stream_ends_with_its_session(sonde_bin, need_corpus, workdir):
    """The console's event stream stops once its session is logged out (issue 19, item 6)."""
    users = workdir / "users"
    _add_user(sonde_bin, users, "vera", "viewer", "viewer password 1")
    proc, port = _start(sonde_bin, need_corpus, [], users)
    try:
        _wait_up(proc, port)
        c = Client(port)
        assert c.login("vera", "viewer password 1")[0] == 200
        s = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        s.request("GET", "/api/v1/events", headers={"Cookie": c.cookie})
        r = s.getresponse()
        assert r.status == 200
        assert b"event: interface" in r.readline() + r.readline() + r.readline()
        assert Client(port).request("POST", "/api/v1/logout",
                                    headers={"Cookie": c.cookie})[0] == 204
        t = time.time()
        rest = r.read()  # returns when the server ends the stream
        assert time.time() - t < 5, "the stream outlived its session"
        assert rest.count(b"event: interface") <= 2, rest
    finally:
        _stop(proc)
