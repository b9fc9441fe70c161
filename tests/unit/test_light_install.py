"""``make serve`` installs hightide without extras (issue 32 item 1): the broker and every
operator command must work without the console, Spark and test packages, and a command
that needs an extra says so in one line naming its make target.

Each case runs in a fresh interpreter whose imports of the extras' packages fail, as in
a venv made by ``make serve``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# the top-level modules of the console, spark and test extras (pyproject.toml)
EXTRAS = ("pyspark", "pyarrow", "numpy", "pandas", "matplotlib", "grpc", "google", "zstandard", "starlette",
          "jinja2", "uvicorn", "multipart", "python_multipart", "selenium", "httpx", "pytest", "hypothesis",
          "confluent_kafka", "kafka", "aiokafka", "importlinter", "snappy", "lz4", "mypy", "rich")

PRELUDE = textwrap.dedent(f"""
    import sys
    class NoExtras:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {EXTRAS!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None
    sys.meta_path.insert(0, NoExtras())
    from click.testing import CliRunner
    from hightide.cli import main
""")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_the_broker_and_every_operator_command_need_no_extra():
    done = run("""
        import click
        import hightide.server.broker, hightide.monitoring.exporter  # serve, exporter
        def walk(group, path=()):
            ctx = click.Context(group)
            for name in group.list_commands(ctx):
                cmd = group.get_command(ctx, name)
                yield (*path, name)
                if isinstance(cmd, click.Group):
                    yield from walk(cmd, (*path, name))
        for path in walk(main):
            r = CliRunner().invoke(main, [*path, "--help"])
            assert r.exit_code == 0, (path, r.output, r.exception)
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_a_command_without_its_extra_is_one_line_naming_its_make_target(tmp_path):
    done = run(f"""
        for args in (["console"], ["spark", "sample-offsets", "--out", {str(tmp_path)!r}, "--count", "1"],
                     ["spark", "lag-history", "--samples", {str(tmp_path)!r}, "--out", {str(tmp_path)!r}]):
            r = CliRunner().invoke(main, args)
            print(r.exit_code, r.output.strip())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "1 Error: the console needs `make console` (pip install 'hightide[console]') (no module uvicorn)",
        "1 Error: hightide spark sample-offsets needs `make spark` (pip install 'hightide[spark]') (no module pyarrow)",
        "1 Error: hightide spark lag-history needs `make spark` (pip install 'hightide[spark]') (no module pyspark)",
    ]
