"""A small client for OpenAI-style servers (llama.cpp's llama-server, vLLM): GET a JSON document,
POST a request and read its server-sent events. Standard library only (urllib): no new dependency.

Every failure becomes an EngineError with one line: not reachable (no connection, timeout), or
answered something else (an HTTP error, a body that is not JSON or not an event stream)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Iterator

from specdec.engines.base import EngineError

EXCERPT = 160  # characters of an unexpected answer quoted in the error line


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 3] + "..."


def _open(engine: str, base_url: str, path: str, body: dict | None, timeout: float):
    url = base_url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        detail = _excerpt(err.read().decode("utf-8", "replace")) if err.fp else ""
        raise EngineError(f"{engine} at {base_url} answered something else: HTTP {err.code} on {path}"
                          + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise EngineError(f"{engine} at {base_url} is not reachable ({reason})") from None
    except ValueError as err:  # a malformed URL
        raise EngineError(f"{engine}: {base_url!r} is not a server address ({err})") from None


def get_json(engine: str, base_url: str, path: str, timeout: float = 5.0) -> dict:
    """GET base_url + path and parse it as a JSON object."""
    with _open(engine, base_url, path, None, timeout) as response:
        text = response.read().decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise EngineError(f"{engine} at {base_url} answered something else on {path}: {_excerpt(text)!r}") from None
    if not isinstance(value, dict):
        raise EngineError(f"{engine} at {base_url} answered something else on {path}: {_excerpt(text)!r}")
    return value


def post_stream(engine: str, base_url: str, path: str, body: dict, timeout: float = 120.0) -> Iterator[tuple[float, dict]]:
    """POST `body` (it should ask for "stream": true) and yield (seconds since the request was sent,
    the JSON of one `data:` event) as each event arrives, until `data: [DONE]` or the end of the
    stream. `timeout` bounds the wait for each read, not the whole run."""
    start = time.perf_counter()
    with _open(engine, base_url, path, body, timeout) as response:
        kind = response.headers.get("Content-Type", "")
        if "text/event-stream" not in kind:
            raise EngineError(f"{engine} at {base_url} answered something else on {path}: "
                              f"{kind or 'no content type'}, not an event stream: {_excerpt(response.read(400).decode('utf-8', 'replace'))!r}")
        try:
            for raw in response:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                field, _, value = line.partition(":")
                if field == "error":  # llama-server reports a failure inside the stream this way
                    raise EngineError(f"{engine} at {base_url} failed during {path}: {_excerpt(value)}")
                if field != "data":
                    continue  # blank separators, comments, event names
                value = value.strip()
                if value == "[DONE]":
                    return
                try:
                    event = json.loads(value)
                except json.JSONDecodeError:
                    raise EngineError(f"{engine} at {base_url} answered something else on {path}: {_excerpt(value)!r}") from None
                if isinstance(event, dict) and "error" in event and len(event) <= 2:
                    raise EngineError(f"{engine} at {base_url} failed during {path}: {_excerpt(json.dumps(event['error']))}")
                yield time.perf_counter() - start, event
        except (socket.timeout, TimeoutError):
            raise EngineError(f"{engine} at {base_url} stopped answering: no event for {timeout:.0f} s on {path}") from None
        except (ConnectionError, urllib.error.URLError) as err:
            raise EngineError(f"{engine} at {base_url} dropped the stream on {path} ({err})") from None


def post_json(engine: str, base_url: str, path: str, body: dict, timeout: float = 120.0) -> dict:
    """POST `body` and parse the answer as a JSON object (a request without streaming)."""
    with _open(engine, base_url, path, body, timeout) as response:
        text = response.read().decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise EngineError(f"{engine} at {base_url} answered something else on {path}: {_excerpt(text)!r}")
    return value
