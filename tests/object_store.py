"""An S3-compatible server for the tests: S3Proxy (jvm/ivy.xml `s3proxy`) with its filesystem
backend, on a free loopback port, tied to the test process like the brokers. Every request is
logged (`requests`), so tests and benchmarks can count them by kind."""

from __future__ import annotations

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
from typing import BinaryIO

from benchmarks.jvm import jars
from synclib.embedded.broker import LOOPBACK, free_port, terminate, tied_to_this_process, wait_for_port

S3PROXY = "s3proxy"
ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION = "synclib-test", "synclib-test-secret", "us-east-1"
# S3Proxy's handler logs each request at DEBUG: "request: Request(GET)[/bucket/key?...]" or similar.
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.s3proxy.S3ProxyHandler" level="DEBUG"/>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
"""
_REQUEST = re.compile(r"request: Request\((?P<method>[A-Z]+) (?P<uri>\S+)\)")


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

    def put(self, bucket: str, key: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        """PUT one object with extra request headers (e.g. `If-None-Match: *`), signed with AWS
        Signature V4 as every S3 client signs; the HTTP status of the answer."""
        now = dt.datetime.now(dt.timezone.utc)
        stamp, day, digest = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d"), hashlib.sha256(body).hexdigest()
        host, path = f"{LOOPBACK}:{self.port}", f"/{bucket}/{key}"
        signed = "host;x-amz-content-sha256;x-amz-date"
        canonical = (f"PUT\n{path}\n\nhost:{host}\nx-amz-content-sha256:{digest}\nx-amz-date:{stamp}\n\n"
                     f"{signed}\n{digest}")
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signing = f"AWS4{SECRET_ACCESS_KEY}".encode()
        for part in (day, REGION, "s3", "aws4_request"):
            signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
        request = urllib.request.Request(f"{self.endpoint}{path}", data=body, method="PUT", headers={
            **(headers or {}), "x-amz-date": stamp, "x-amz-content-sha256": digest,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/{scope}, SignedHeaders={signed}, "
                             f"Signature={signature}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    def requests(self) -> Counter[str]:
        """The requests served so far, by HTTP method."""
        text = self.log_path.read_text() if self.log_path.exists() else ""
        return Counter(match["method"] for match in _REQUEST.finditer(text))

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
