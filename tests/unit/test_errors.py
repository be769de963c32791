"""One line of an error (synclib/errors.py) and the Java exception behind py4j's wrapper
(synclib/compat/py4j.py)."""

from synclib.compat.py4j import java_error
from synclib.errors import first_line


def test_the_first_line_skips_blank_lines_and_strips() -> None:
    assert first_line(ValueError("\n  bad value  \nmore")) == "bad value"
    assert first_line("") == first_line(None) == ""


def test_an_exception_not_from_the_jvm_has_no_java_error() -> None:
    assert java_error(RuntimeError("An error occurred while calling o170.save.")) is None
