"""An S3-compatible server for the tests and benchmarks: S3Proxy (jvm/ivy.xml `s3proxy`) with its
filesystem backend, on a free loopback port, tied to this process like the brokers. Every request
is logged (`requests`, `log`), so tests and benchmarks can count them, and `classify` tells what
a request is (LIST, GET, PUT, ...) and whose (Spark's checkpoint, the Delta log, data files)."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import hmac
import os
import re
import subprocess
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import BinaryIO, NamedTuple
from urllib.parse import parse_qs, quote, unquote, urlsplit

from harness.jvm import jars
from synclib.embedded.broker import LOOPBACK, free_port, terminate, tied_to_this_process, wait_for_port

S3PROXY = "s3proxy"
ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION = "synclib-test", "synclib-test-secret", "us-east-1"
# S3Proxy's handler logs each request at DEBUG, as Jetty prints it:
# "request: ...ServletApiRequest@1a2b{...{GET@3c4d http://127.0.0.1:PORT/bucket/key?... HTTP/1.1}}}".
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.s3proxy.S3ProxyHandler" level="DEBUG"/>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
"""
_REQUEST = re.compile(r"request: \S*\{(?P<method>[A-Z]+)@\w+ (?P<uri>\S+) HTTP/")

SYNCLIB_DIR = "synclib"  # synclib's own files in a checkpoint (synclib.spark_checkpoint.synclib_file)
DELTA_LOG = "delta log"
DATA_FILES = "data files"
SPARK_CHECKPOINT = "spark checkpoint"
SYNCLIB_FILES = "synclib files"
OTHER = "other"


class Request(NamedTuple):
    method: str
    key: str  # bucket/key, unquoted; for a listing bucket/prefix
    query: dict[str, list[str]]
    listing: bool = False


def parse_request(method: str, uri: str) -> Request:
    """One logged request: the method, the object key (a listing's prefix) and the query."""
    parts = urlsplit(uri)
    query = parse_qs(parts.query, keep_blank_values=True)
    key = unquote(parts.path).strip("/")
    if method == "GET" and ("list-type" in query or "/" not in key):  # ListObjects(V2) on a bucket
        return Request(method, f"{key}/{query.get('prefix', [''])[0]}", query, listing=True)
    return Request(method, key, query)


def kind(request: Request) -> str:
    """The request as S3 prices it: LIST, GET, HEAD, PUT (a part upload too), POST (creating or
    completing a multipart upload) or DELETE (a multi-object delete, POST ?delete, too)."""
    if request.listing:
        return "LIST"
    if request.method == "POST" and "delete" in request.query:
        return "DELETE"
    return request.method


def owner(request: Request, table: str, checkpoint: str) -> str:
    """Whose object a request touches: the Delta log (`table`/_delta_log, and the table's root),
    the table's data files, synclib's own files in the checkpoint (`synclib/`), Spark's checkpoint
    (the rest of it: offsets, commits, metadata, sources, their temporary files); `table` and
    `checkpoint` as bucket/key prefixes."""
    key = request.key.rstrip("/")
    if key == table or key.startswith(f"{table}/_delta_log"):
        return DELTA_LOG
    if key.startswith(f"{table}/"):
        return DATA_FILES
    if key == f"{checkpoint}/{SYNCLIB_DIR}" or key.startswith(f"{checkpoint}/{SYNCLIB_DIR}/"):
        return SYNCLIB_FILES
    if key == checkpoint or key.startswith(f"{checkpoint}/"):
        return SPARK_CHECKPOINT
    return OTHER


def bucket_key(location: str) -> str:
    """`s3://bucket/key` or `s3a://bucket/key` as bucket/key."""
    return location.split("://", 1)[1].strip("/")


class S3Server:
    """S3Proxy on 127.0.0.1:<free port>, its buckets directories under `directory/data`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.log_path = directory / "s3proxy.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._output: BinaryIO | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def storage_settings(self) -> dict[str, object]:
        """The forwarder's `storage.s3` section for this server."""
        return {"endpoint": self.endpoint, "path_style": True, "allow_http": True,
                "access_key_id": ACCESS_KEY_ID, "secret_access_key": SECRET_ACCESS_KEY}

    def bucket(self, prefix: str = "t") -> str:
        """A new empty bucket's name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        (self.directory / "data" / name).mkdir(parents=True)
        return name

    def start(self, timeout_s: float = 60.0) -> S3Server:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        properties = self.directory / "s3proxy.properties"
        properties.write_text(
            f"s3proxy.endpoint={self.endpoint}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={ACCESS_KEY_ID}\n"
            f"s3proxy.credential={SECRET_ACCESS_KEY}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={data}\n")
        logback = self.directory / "logback.xml"
        logback.write_text(_LOGBACK.format(log=self.log_path))
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        command = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlogback.configurationFile={logback}",
                   "-cp", os.pathsep.join(jars(S3PROXY)), "org.gaul.s3proxy.Main", "--properties", str(properties)]
        self._output = (self.directory / "s3proxy.out").open("wb")
        self._process = subprocess.Popen(tied_to_this_process(command), stdout=self._output,
                                         stderr=subprocess.STDOUT)
        try:
            wait_for_port(LOOPBACK, self.port, timeout_s)
        except TimeoutError as exc:
            self.stop()
            output = (self.directory / "s3proxy.out").read_text()[-2000:]
            raise RuntimeError(f"S3Proxy did not start: {output}") from exc
        return self

    def behind(self, port: int) -> S3Server:
        """This server as its clients reach it through a proxy on loopback port `port`
        (`harness.delay_proxy`): the same buckets and request log; not to be started or stopped."""
        view = copy.copy(self)
        view.port, view._process, view._output = port, None, None
        return view

    def put(self, bucket: str, key: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        """PUT one object with extra request headers (e.g. `If-None-Match: *`); the HTTP status of the answer."""
        return self._signed("PUT", f"/{bucket}/{key}", "", body, headers)[0]

    def list_keys(self, bucket: str, prefix: str) -> list[str]:
        """The keys a ListObjectsV2 of `prefix` with delimiter `/` returns (S3A's directory probe)."""
        status, answer = self._signed("GET", f"/{bucket}", f"delimiter=%2F&list-type=2&prefix={quote(prefix, safe='')}")
        assert status == 200, answer
        return re.findall(r"<Key>([^<]*)</Key>", answer.decode())

    def _signed(self, method: str, path: str, query: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One request signed with AWS Signature V4 as every S3 client signs (`query` in canonical
        order): the HTTP status and body of the answer."""
        now = dt.datetime.now(dt.timezone.utc)
        stamp, day, digest = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d"), hashlib.sha256(body).hexdigest()
        host = f"{LOOPBACK}:{self.port}"
        signed = "host;x-amz-content-sha256;x-amz-date"
        canonical = (f"{method}\n{path}\n{query}\nhost:{host}\nx-amz-content-sha256:{digest}\nx-amz-date:{stamp}\n\n"
                     f"{signed}\n{digest}")
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signing = f"AWS4{SECRET_ACCESS_KEY}".encode()
        for part in (day, REGION, "s3", "aws4_request"):
            signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
        # A content type as every S3 client sends one: urllib's default (a form) has Jetty read the body as form fields.
        request = urllib.request.Request(
            f"{self.endpoint}{path}{'?' + query if query else ''}", data=body if method == "PUT" else None,
            method=method, headers={
                **(headers or {}), "Content-Type": "application/octet-stream", "x-amz-date": stamp,
                "x-amz-content-sha256": digest,
                "Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/{scope}, SignedHeaders={signed}, "
                                 f"Signature={signature}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read()

    def log(self) -> list[Request]:
        """Every request served so far, in order (a benchmark marks a point with `len(log())`)."""
        text = self.log_path.read_text() if self.log_path.exists() else ""
        return [parse_request(match["method"], match["uri"]) for match in _REQUEST.finditer(text)]

    def requests(self) -> Counter[str]:
        """The requests served so far, by HTTP method."""
        return Counter(request.method for request in self.log())

    def local_path(self, location: str) -> str:
        """Where the filesystem backend keeps the objects under `location` (s3://bucket/key): a
        benchmark watches a table's log there without adding requests to the count."""
        return str(self.directory / "data" / bucket_key(location))

    def overrides(self) -> list[str]:
        """The `storage.s3` settings as config overrides (`--set` syntax)."""
        return [f"storage.s3.{key}={str(value).lower() if isinstance(value, bool) else value}"
                for key, value in self.storage_settings().items()]

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._process is None:
            return
        terminate(self._process, timeout_s)
        self._process = None
        if self._output is not None:
            self._output.close()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
