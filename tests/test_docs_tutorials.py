"""Every command a tutorial shows runs, on small settings, in a scratch folder.

The ``bash`` and ``python`` code blocks of each ``docs/tutorial-*.md`` run in
order, in a temporary folder that links the checkout's ``scenarios/`` and
``docs/``; a block must exit 0. Blocks written as ``sh`` or ``console`` are
shown but not run: they need other machines, Docker or a fresh install.

What the test changes, so a tutorial runs in seconds and leaves nothing behind:

- ``flowerbed run`` and ``flowerbed sweep`` get the tutorial's small settings
  (:data:`SMALL`) appended as ``--set`` options (the last ``--set`` wins);
- ``pip install -e PATH`` installs a copy of PATH into a scratch folder on
  ``PYTHONPATH`` (no install into the shared environment);
- a block that is only ``flowerbed deploy local ...`` is started in the
  background, the blocks after it run once it says it is ready, and Ctrl-C
  stops it at the end, as the tutorial tells its reader to do;
- a command ending in ``# exit status N`` must exit with N.

``FLWR_HOME`` and ``FLOWERBED_CACHE`` point into the scratch folder.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
STATUS = re.compile(r"^(?P<cmd>.*?)\s+#\s*exit status (?P<code>\d+)\s*$")

#: ``--set`` values appended to the ``run`` and ``sweep`` commands of each tutorial.
SMALL = {
    "tutorial-quickstart": ["rounds=2"],
    "tutorial-first-heterogeneity-study": ["rounds=1"],
    "tutorial-bring-your-own-plugin": ["rounds=2"],
    "tutorial-from-simulation-to-deployment": ["rounds=1"],
}
TUTORIALS = sorted(p.stem for p in DOCS.glob("tutorial-*.md"))

#: Functions every bash block sees (``BASH_ENV``); ``@SMALL@`` is filled in per tutorial.
SHELL_FUNCTIONS = r"""
flowerbed() {
  case "$1" in
    run|sweep)
      if [[ " $* " == *" --resume "* ]]; then command flowerbed "$@"
      else command flowerbed "$@" @SMALL@; fi ;;
    *) command flowerbed "$@" ;;
  esac
}
pip() {
  if [ "$1" = install ] && [ "$2" = -e ] && [ $# -eq 3 ]; then
    local copy="$FB_SCRATCH/src/$(basename "$3")"
    mkdir -p "$FB_SCRATCH/src" && rm -rf "$copy" && cp -r "$3" "$copy"
    command python -m pip install --quiet --no-deps --no-build-isolation \
      --target "$FB_SITE" "$copy"
  else
    echo "the tutorial test runs only 'pip install -e PATH', not: pip $*" >&2
    return 1
  fi
}
"""


def code_blocks(tutorial: str) -> list[tuple[str, str]]:
    """``(language, code)`` of the blocks the test runs, in page order."""
    text = (DOCS / f"{tutorial}.md").read_text()
    return [(lang, body) for lang, body in FENCE.findall(text) if lang in ("bash", "python")]


def with_status_checks(code: str) -> str:
    """``cmd  # exit status N`` lines rewritten to check that ``cmd`` exits with N."""
    out = []
    for line in code.splitlines():
        m = STATUS.match(line)
        if m:
            code_ = m["code"]
            line = (f"status=0; {m['cmd']} || status=$?; [ \"$status\" -eq {code_} ] || "
                    f"{{ echo \"expected exit status {code_}, got $status\" >&2; exit 1; }}")
        out.append(line)
    return "\n".join(out) + "\n"


def is_service(code: str) -> bool:
    """A block that only starts ``flowerbed deploy local`` (it runs until Ctrl-C)."""
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    words = lines[0].split("#")[0].split() if len(lines) == 1 else []
    return words[:3] == ["flowerbed", "deploy", "local"]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A folder that looks like the checkout's root to the tutorials' commands."""
    for name in ("scenarios", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def environment(scratch: Path, tutorial: str) -> dict[str, str]:
    small = " ".join(f"--set {shlex.quote(v)}" for v in SMALL.get(tutorial, []))
    functions = scratch / "functions.sh"
    functions.write_text(SHELL_FUNCTIONS.replace("@SMALL@", small))
    site = scratch / "site"
    site.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=f"{site}{os.pathsep}{ROOT}",
        BASH_ENV=str(functions),
        FB_SCRATCH=str(scratch),
        FB_SITE=str(site),
        FLWR_HOME=str(scratch / "flwr"),
        FLOWERBED_CACHE=str(scratch / "cache"),
        OMP_NUM_THREADS="1",
        COLUMNS="120",
    )
    return env


def run_block(lang: str, code: str, cwd: Path, env: dict[str, str], where: str) -> None:
    if lang == "bash":
        command = ["bash", "-eo", "pipefail", "-c", with_status_checks(code)]
    else:
        script = cwd / "block.py"
        script.write_text(code)
        command = [sys.executable, str(script)]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (
        f"{where} exited {done.returncode}:\n{code}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}"
    )


@pytest.fixture
def services() -> Iterator[list[subprocess.Popen[str]]]:
    """Background commands; each gets Ctrl-C (its whole process group) at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def start_service(code: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start a ``flowerbed deploy local`` block and wait until it says it is ready."""
    log = cwd / "service.log"
    proc = subprocess.Popen(["bash", "-c", f"exec {code.strip()}"], cwd=cwd, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if "Ctrl-C stops every process" in log.read_text():
            return proc
        assert proc.poll() is None, f"deploy local stopped:\n{log.read_text()[-3000:]}"
        time.sleep(1)
    raise AssertionError(f"deploy local not ready after 180 s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("tutorial", TUTORIALS)
def test_every_command_of_the_tutorial_runs(tutorial, scratch, services):
    env = environment(scratch, tutorial)
    blocks = code_blocks(tutorial)
    assert blocks, f"{tutorial} shows no command"
    for i, (lang, code) in enumerate(blocks):
        if lang == "bash" and is_service(code):
            services.append(start_service(code, scratch, env))
            continue
        run_block(lang, code, scratch, env, f"{tutorial}, block {i + 1}")


def test_every_tutorial_has_small_settings():
    assert set(TUTORIALS) == set(SMALL)


def test_exit_status_comments_become_checks():
    script = with_status_checks("true\nfalse   # exit status 1\n")
    assert subprocess.run(["bash", "-e", "-c", script]).returncode == 0
    wrong = with_status_checks("true   # exit status 3\n")
    assert subprocess.run(["bash", "-e", "-c", wrong], capture_output=True).returncode == 1


def test_only_deploy_local_blocks_run_in_the_background():
    assert is_service("flowerbed deploy local --nodes 2\n")
    assert is_service("# start it\nflowerbed deploy local --nodes 2   # until Ctrl-C\n")
    assert not is_service("flowerbed deploy compose --nodes 2 --out x\n")
    assert not is_service("flowerbed deploy local --nodes 2\nflowerbed run x.yaml\n")
