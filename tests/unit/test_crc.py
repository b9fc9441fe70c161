"""hightide.protocol.crc: the crc32c package's function, loaded without the package's
__init__ (which costs start-up time through importlib.metadata)."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from hightide.protocol.crc import crc32c


def test_the_standard_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value (RFC 3720)
    assert crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


@given(st.binary(max_size=4096), st.integers(0, 2**32 - 1))
def test_equals_the_packages_function(data, start):
    import crc32c as package
    assert crc32c(data) == package.crc32c(data)
    assert crc32c(data, start) == package.crc32c(data, start)


def test_loading_it_does_not_import_importlib_metadata_and_the_package_still_imports():
    code = ("import sys; from hightide.protocol.crc import crc32c; "
            "assert 'importlib.metadata' not in sys.modules, 'importlib.metadata imported'; "
            "assert 'crc32c' not in sys.modules; "
            "import crc32c as p; assert p.crc32c is crc32c; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
