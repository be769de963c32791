"""Every use of py4j (the bridge from the Python driver to a classic session's JVM), in one place.

synclib reaches the JVM for two conveniences, both optional, and reads the errors it raises:

- replacing the driver JVM's TERM/INT handlers (`sun.misc.Signal`, a JDK-internal API) with a
  Python callback, so `kill <spark-submit pid>` stops the query gracefully;
- asking the JVM's class loader whether a class (Delta's) is on the classpath;
- naming the Java exception a `Py4JJavaError` wraps (its class and message), where py4j's own
  first line says only which call failed (`An error occurred while calling o170.save.`).

Both are used only with the py4j minor version they are tested with (`TESTED_VERSION`, the
one PySpark 4.2 pins); `version_problem()` says otherwise and callers then go without them.
A Spark Connect session has no JVM in the client, so none of this is reached there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from synclib.errors import first_line

logger = logging.getLogger(__name__)

TESTED_VERSION = (0, 10, 9)  # major, minor, micro: PySpark 4.2 requires py4j 0.10.9.7 to 0.10.9.9
SIGNALS = ("TERM", "INT")


def installed_version() -> str:
    try:
        from py4j.version import __version__
    except ImportError:  # the Spark Connect-only client (pyspark-client) has no py4j
        return "not installed"
    return str(__version__)


def version_problem() -> str | None:
    """Why py4j must not be used here; None when the installed version is the tested one."""
    version = installed_version()
    release = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if release and tuple(int(part) for part in release.groups()) == TESTED_VERSION:
        return None
    return f"py4j {version} is not the version synclib is tested with ({'.'.join(map(str, TESTED_VERSION))}.x)"


def class_loadable(jvm: Any, class_name: str) -> bool:
    """Whether the JVM's context class loader finds `class_name`."""
    from py4j.protocol import Py4JError

    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(class_name)
    except Py4JError:
        return False
    return True


def java_error(exc: BaseException) -> str | None:
    """`class: first line of the message` of the Java exception a `Py4JJavaError` wraps; None for
    any other exception, or when the JVM cannot say."""
    try:
        from py4j.protocol import Py4JError, Py4JJavaError
    except ImportError:  # the Spark Connect-only client: no JVM errors
        return None
    if not isinstance(exc, Py4JJavaError):
        return None
    try:
        java = exc.java_exception
        return f"{java.getClass().getName()}: {first_line(java.getMessage())}"
    except Py4JError:
        return None


class JvmSignalHandler:
    """A `sun.misc.SignalHandler` implemented in Python (a py4j callback): the first TERM or INT
    calls `on_signal("TERM")`, then restores the JVM's previous handler for that signal, so the
    same signal again gets the JVM's default behaviour (shut down at once)."""

    def __init__(self, jvm: Any, on_signal: Callable[[str], None]) -> None:
        self._jvm = jvm
        self._on_signal = on_signal
        self.previous: dict[str, Any] = {}

    @classmethod
    def install(cls, jvm: Any, on_signal: Callable[[str], None],
                signals: Sequence[str] = SIGNALS) -> JvmSignalHandler:
        """Replace the JVM's handlers of `signals` (the gateway's callback server must run);
        a signal the JVM refuses is logged and keeps its handler."""
        from py4j.protocol import Py4JError

        handler = cls(jvm, on_signal)
        for name in signals:
            try:
                handler.previous[name] = jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), handler)
            except Py4JError as exc:
                logger.warning("cannot handle SIG%s in the JVM (%s): it stops Spark at once", name, exc)
        return handler

    def handle(self, sig: Any) -> None:
        name = sig.getName()
        self._on_signal(name)  # first: the stop request must not hang on the call back into the JVM below
        try:
            self._jvm.sun.misc.Signal.handle(sig, self.previous[name])
        except Exception as exc:  # noqa: BLE001 - the request is recorded; only a second signal's effect differs
            logger.warning("SIG%s: the JVM's own handler is not restored (%s); a second SIG%s is handled "
                           "like the first", name, exc, name)

    class Java:
        implements: ClassVar[list[str]] = ["sun.misc.SignalHandler"]
