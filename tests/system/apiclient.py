"""A tiny client for sonde's REST API in the system tests: GET a path, read its JSON, or the
status and JSON error of a request that must fail."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def get(base, path):
    """(status, Content-Type, body) of GET base+path."""
    with urllib.request.urlopen(base + path, timeout=10) as r:
        body = r.read().decode()
        return r.status, r.headers.get("Content-Type", ""), body


def get_json(base, path):
    status, _, body = get(base, path)
    assert status == 200
    return json.loads(body)


def error(base, path):
    """(status, JSON body) of a request the API must refuse."""
    try:
        get(base, path)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())
    raise AssertionError(f"{path} did not fail")
