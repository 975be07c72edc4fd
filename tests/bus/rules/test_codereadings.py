"""Interpreter one-liners read as the shell commands that do the same."""

from __future__ import annotations

import pytest

from bus.rules.codereadings import MAX_CALLS, read_code, read_source
from bus.rules.shellwords import Word

pytestmark = pytest.mark.timeout(30)


def texts(language: str, code: str) -> list[str]:
    found = read_source(language, code)
    return [" ".join(w.raw for w in words) for words in found.commands] + [
        "<script unknown>" if script is None else f"<script {script}>" for script in found.scripts
    ]


@pytest.mark.parametrize(
    ("language", "code", "reading"),
    [
        ("py", "import shutil; shutil.rmtree('/')", "rm -rf /"),
        ("py", 'from shutil import rmtree\nrmtree("/srv")', "rm -rf /srv"),
        ("py", "import os; os.remove('/etc/passwd')", "rm -f /etc/passwd"),
        ("py", "import os; os.unlink('/x')", "rm -f /x"),
        ("py", "import os; os.rmdir('/x')", "rmdir /x"),
        ("py", "from pathlib import Path; Path('/x').unlink()", "rm -f /x"),
        ("py", "import os; os.system('rm -rf /')", "<script rm -rf />"),
        ("py", "import subprocess; subprocess.run('rm -rf /', shell=True)", "<script rm -rf />"),
        ("py", "import subprocess; subprocess.run(['rm', '-rf', '/'])", "rm -rf /"),
        ("py", "import subprocess as s; s.check_call(['git', 'push', '-f'])", "git push -f"),
        ("py", "import shutil; shutil.rmtree(path)", "rm -rf <expr>"),
        ("py", "import shutil; shutil.rmtree(f'/{x}')", "rm -rf /{x}"),
        ("py", "import os; os.system('rm -rf ' + d)", "<script unknown>"),
        ("js", "require('fs').rmSync('/', {recursive: true})", "rm -rf /"),
        ("js", "const fs = require('fs'); fs.rmdirSync('/x', {recursive: true})", "rm -rf /x"),
        ("js", "require('fs').unlinkSync('/x')", "rm -f /x"),
        ("js", "require('fs/promises').rm('/x', {recursive: true, force: true})", "rm -rf /x"),
        ("js", "require('child_process').execSync('rm -rf /')", "<script rm -rf />"),
        ("js", "require('child_process').spawnSync('rm', ['-rf', '/'])", "rm -rf /"),
        ("js", "require('child_process').execSync(`rm -rf ${d}`)", "<script unknown>"),
        ("rb", "require 'fileutils'; FileUtils.rm_rf('/')", "rm -rf /"),
        ("rb", 'FileUtils.rm_rf "/"', "rm -rf /"),
        ("rb", "File.delete('/x')", "rm -f /x"),
        ("rb", "system('rm -rf /')", "<script rm -rf />"),
        ("rb", "system('rm', '-rf', '/')", "rm -rf /"),
        ("rb", "`rm -rf /`", "<script rm -rf />"),
        ("rb", "%x(rm -rf /)", "<script rm -rf />"),
        ("rb", 'system("rm -rf #{d}")', "<script unknown>"),
        ("pl", "use File::Path; rmtree('/')", "rm -rf /"),
        ("pl", "unlink '/x'", "rm -f /x"),
        ("pl", "system('rm -rf /')", "<script rm -rf />"),
        ("pl", "qx(rm -rf /)", "<script rm -rf />"),
        ("pl", 'system("rm -rf $d")', "<script unknown>"),
        ("php", "unlink('/x');", "rm -f /x"),
        ("php", "shell_exec('rm -rf /');", "<script rm -rf />"),
        ("py", "import urllib.request as u; u.urlopen('https://x.sh/a').read()", "curl https://x.sh/a"),
        ("py", "import requests; requests.get('https://x.sh/a')", "curl https://x.sh/a"),
        ("js", "fetch('https://x.sh/a').then(r => r.text())", "curl https://x.sh/a"),
        ("rb", "Net::HTTP.get(URI('https://x.sh/a'))", "curl <expr>"),
        ("php", "file_get_contents('https://x.sh/a');", "curl https://x.sh/a"),
    ],
)
def test_a_call_reads_as_a_command(language: str, code: str, reading: str) -> None:
    assert reading in texts(language, code)


def test_a_non_literal_path_is_an_expansion() -> None:
    (command,) = read_source("py", "import shutil; shutil.rmtree(p)").commands
    assert command[-1].dynamic
    (command,) = read_source("py", "import shutil; shutil.rmtree(f'/{x}')").commands
    assert command[-1].dynamic


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("py", "print('rmtree is a word')"),
        ("py", "xs = [1]; xs.remove(1)"),
        ("js", "console.log('rm -rf /')"),
        ("rb", "h = {}; h.delete(:a)"),
        ("php", "echo file_get_contents('composer.json');"),  # a local file: no fetch
    ],
)
def test_harmless_code_reads_as_nothing(language: str, code: str) -> None:
    assert texts(language, code) == []


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("py", "exec('import shutil')"),
        ("py", "__import__('shutil').rmtree('/')"),
        ("py", "import base64; base64.b64decode('cm0=')"),
        ("js", "eval('x')"),
        ("js", "new Function('x')()"),
        ("js", "require(m)"),
        ("rb", "eval('x')"),
        ("pl", "eval 'x'"),
        ("php", "eval('x');"),
    ],
)
def test_code_that_builds_code_is_opaque(language: str, code: str) -> None:
    assert read_source(language, code).opaque


def test_plain_code_is_not_opaque() -> None:
    assert not read_source("py", "import shutil; shutil.rmtree('/tmp/x')").opaque


def words(*values: str) -> tuple[Word, ...]:
    return tuple(Word(v, v) for v in values)


@pytest.mark.parametrize(
    ("argv", "reading"),
    [
        (("python3", "-c", "import shutil; shutil.rmtree('/')"), "rm -rf /"),
        (("python3", "-Bc", "import shutil; shutil.rmtree('/')"), "rm -rf /"),
        (("python3.12", "-W", "ignore", "-c", "import os; os.remove('/x')"), "rm -f /x"),
        (("node", "-e", "require('fs').rmSync('/x')"), "rm -rf /x"),
        (("node", "--eval=require('fs').rmSync('/x')"), "rm -rf /x"),
        (("node", "-p", "require('fs').rmSync('/x')"), "rm -rf /x"),
        (("ruby", "-rfileutils", "-e", "FileUtils.rm_rf('/x')"), "rm -rf /x"),
        (("perl", "-MFile::Path", "-e", "rmtree('/x')"), "rm -rf /x"),
        (("perl", "-le", "unlink '/x'"), "rm -f /x"),
        (("php", "-r", "unlink('/x');"), "rm -f /x"),
    ],
)
def test_an_interpreter_command_reads_its_code(argv: tuple[str, ...], reading: str) -> None:
    found = read_code(words(*argv), None)
    assert reading in [" ".join(w.raw for w in command) for command in found.commands]


@pytest.mark.parametrize(
    "argv",
    [("python3", "script.py"), ("python3", "-m", "http.server"), ("node", "--version"), ("ruby", "-v")],
)
def test_code_not_in_the_command_reads_as_nothing(argv: tuple[str, ...]) -> None:
    assert read_code(words(*argv), None) == read_code(words("python3", "x.py"), None)
    assert not read_code(words(*argv), None).scripts


def test_code_on_standard_input_is_read_or_unknown() -> None:
    assert read_code(words("python3"), None).scripts == (None,)
    assert read_code(words("python3", "-"), "import os; os.system('ls')").scripts == ("ls",)


def test_calls_read_per_script_are_bounded() -> None:
    found = read_source("py", "import os\n" + "os.remove('/x')\n" * (MAX_CALLS + 5))
    assert len(found.commands) == MAX_CALLS
    assert found.scripts == (None,)


def test_reading_is_linear_in_the_code() -> None:
    # a call whose arguments never close, many times: each read within a bounded window
    code = "os.system(" * 20_000 + "'" + "x" * 50_000
    found = read_source("py", code)
    assert len(found.commands) + len(found.scripts) <= MAX_CALLS + 1
