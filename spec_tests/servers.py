"""Real servers on 127.0.0.1 for the remote-record tests (issue 15, part 2), each logging the requests it
serves so a test counts what really went over the wire.

* :func:`http_server` — a stdlib ``ThreadingHTTPServer`` serving a directory, honouring ``Range``
  (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``), answering ``HEAD`` with the size, listing directories
  as HTML (what fsspec's HTTPFileSystem walks), and able to misbehave on purpose (:attr:`Server.faults`,
  by URL path suffix): a 500, a body cut off before its Content-Length, a short body with a matching
  Content-Length, and the hostile modes of issue 27 (:data:`HOSTILE`): a 404 for a file its listing
  names, ``Range`` ignored, a flood or an endless body, a stall inside a body, a slow answer, a flipped
  bit.
* :func:`s3_server` — moto's S3 in server mode (werkzeug), wrapped in a WSGI layer that logs each
  request; clients reach it through s3fs like any S3-compatible endpoint.
"""
from __future__ import annotations

import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Logged:
    method: str
    path: str
    range: str | None

    @property
    def length(self) -> int | None:
        """Bytes the Range asked for (a-b form), else None."""
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.range or "")
        return int(m.group(2)) - int(m.group(1)) + 1 if m else None


@dataclass
class Server:
    url: str
    log: list[Logged] = field(default_factory=list)
    faults: dict[str, str] = field(default_factory=dict)     # URL path suffix -> "error" | "cut" | "short" | HOSTILE
    storage_options: dict = field(default_factory=dict)
    stop: object = None
    delay: float = 2.0                  # "slow": seconds before answering; "stall": seconds mid-body
    flood_bytes: int = 256 * 1024 * 1024    # "flood" / "endless": bytes sent at most (while the client reads)
    sent: int = 0                       # body bytes the hostile modes wrote (what a client had to take)

    def count(self) -> int:
        return len(self.log)

    def since(self, n: int) -> list[Logged]:
        return self.log[n:]


#: Hostile modes (issue 27): "missing" a 404 for a file (its directory page still names it); "norange"
#: ``Range`` ignored (200, the whole file); "flood" ``Range`` ignored with a declared huge body; "endless"
#: no Content-Length, bytes until the client hangs up; "stall" half the body, then silence (the
#: connection held open); "slow" every answer after :attr:`Server.delay`; "flip" one bit of the body flipped.
HOSTILE = ("missing", "norange", "flood", "endless", "stall", "slow", "flip")
_PIECE = b"\0" * (1024 * 1024)


class _Handler(SimpleHTTPRequestHandler):
    server_state: Server = None     # set per server class
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):   # quiet
        pass

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: without TCP_NODELAY each keep-alive response
        # waits out the client's delayed ACK (~40 ms)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _fault(self) -> str | None:
        for suffix, mode in self.server_state.faults.items():
            if self.path.endswith(suffix):
                return mode
        return None

    def do_HEAD(self):
        self.server_state.log.append(Logged("HEAD", self.path, None))
        self._serve(head=True)

    def do_GET(self):
        self.server_state.log.append(Logged("GET", self.path, self.headers.get("Range")))
        self._serve(head=False)

    def _serve(self, head: bool):
        fault = self._fault()
        if fault == "slow":
            time.sleep(self.server_state.delay)
        if fault == "missing":
            self.send_error(404)
            return
        if fault in ("flood", "endless") and not head:
            self._flood(declared=fault == "flood")
            return
        fs_path = self.translate_path(self.path)
        if os.path.isdir(fs_path):
            if not self.path.endswith("/"):
                self.send_response(301)
                self.send_header("Location", self.path + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            f = self.list_directory(fs_path)
            if f is not None:
                body = f.read()
                self.wfile.write(body) if not head else None
            return
        if not os.path.isfile(fs_path):
            self.send_error(404)
            return
        if fault == "error" and not head:
            self.send_error(500, "injected failure")
            return
        size = os.path.getsize(fs_path)
        rng = self.headers.get("Range") if fault != "norange" else None
        start, end = 0, size
        status = 200
        if rng and not head:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m:
                self.send_error(416)
                return
            a, b = m.group(1), m.group(2)
            if a == "":
                start, end = max(0, size - int(b)), size
            else:
                start, end = int(a), size if b == "" else min(size, int(b) + 1)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        with open(fs_path, "rb") as fh:
            fh.seek(start)
            body = fh.read(end - start)
        declared = len(body)
        if fault == "short" and not head:
            body = body[: len(body) // 2]
            declared = len(body)
        if fault == "flip" and body and not head:
            i = len(self.server_state.log) * 7919 % (8 * len(body))
            body = bytearray(body)
            body[i // 8] ^= 1 << (i % 8)
            body = bytes(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{start + declared - 1}/{size}")
        self.send_header("Content-Length", str(declared if not head else size))
        if fault == "cut" and not head:
            self.send_header("Connection", "close")
        self.end_headers()
        if head:
            return
        if fault in ("cut", "stall"):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if fault == "stall":
                time.sleep(self.server_state.delay)
            self.close_connection = True
            return
        self.wfile.write(body)

    def _flood(self, declared: bool) -> None:
        """A 200 whatever the Range: zeros up to ``flood_bytes``, with that length declared or none
        (then until the client hangs up), counted in :attr:`Server.sent`."""
        cap = self.server_state.flood_bytes
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if declared:
            self.send_header("Content-Length", str(cap))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        done = 0
        try:
            while done < cap:
                n = min(len(_PIECE), cap - done)
                self.wfile.write(_PIECE[:n])
                done += n
                self.server_state.sent += n
        except OSError:          # the client hung up: what a bounded reader does
            pass


def http_server(root: Path) -> Server:
    """Serve ``root`` over HTTP on 127.0.0.1 (an ephemeral port); call ``server.stop()`` to end it."""
    state = Server("")
    handler = type("Handler", (_Handler,), {"server_state": state})

    def make(*a, **kw):
        return handler(*a, directory=str(root), **kw)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None     # a client hanging up on a hostile body: expected
    return _run(httpd, state)


def _run(srv, state: Server) -> Server:
    """Serve in a daemon thread; ``state.url`` and ``state.stop`` set."""
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    state.url = f"http://127.0.0.1:{srv.server_address[1]}"

    def stop():
        srv.shutdown()
        srv.server_close()
        t.join(5)

    state.stop = stop
    return state


def s3_server() -> Server:
    """moto's S3 in server mode on 127.0.0.1, every request logged (method, path, Range)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    state = Server("")
    app = DomainDispatcherApplication(create_backend_app)

    def logged(environ, start_response):
        query = environ.get("QUERY_STRING", "")
        state.log.append(Logged(environ["REQUEST_METHOD"], environ.get("PATH_INFO", "") + ("?" + query if query else ""),
                                environ.get("HTTP_RANGE")))
        return app(environ, start_response)

    _run(make_server("127.0.0.1", 0, logged, threaded=True, request_handler=MotoRequestHandler), state)
    state.storage_options = {"endpoint_url": state.url, "key": "testing", "secret": "testing",
                             "client_kwargs": {"region_name": "eu-west-1"}, "skip_instance_cache": True,
                             "use_listings_cache": False}
    return state


def upload(server: Server, bucket: str, local: Path, key: str) -> str:
    """Put a local file or directory tree under ``s3://bucket/key`` (through s3fs); returns the URL."""
    import s3fs
    fs = s3fs.S3FileSystem(**server.storage_options)
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    if local.is_dir():
        for p in sorted(local.rglob("*")):
            if p.is_file():
                fs.pipe_file(f"{bucket}/{key}/{p.relative_to(local).as_posix()}", p.read_bytes())
    else:
        fs.pipe_file(f"{bucket}/{key}", local.read_bytes())
    return f"s3://{bucket}/{key}"
