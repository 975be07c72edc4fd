"""What an interpreter one-liner does, read as the shell commands that do the same.

``python3 -c "import shutil; shutil.rmtree('/')"`` removes what ``rm -rf /`` removes, so the
rules that deny ``rm -rf`` must see it. The code of ``python -c``, ``node -e``/``-p``,
``ruby -e``, ``perl -e``/``-E``, ``php -r``, or a script fed to one of them on standard input
(a here-document or here-string), is searched for the calls that remove files or run
commands, and each gives a reading:

* removing a tree (``shutil.rmtree``, ``fs.rmSync``/``rmdirSync``/``fs.rm``, ``FileUtils.rm_rf``/
  ``rm_r``/``remove_dir``, ``File::Path`` ``rmtree``/``remove_tree``) reads as ``rm -rf PATH``;
* removing a file (``os.remove``, ``os.unlink``, ``Path(...).unlink``, ``fs.unlinkSync``,
  ``File.delete``, ``FileUtils.rm``/``rm_f``, perl's and PHP's ``unlink``) as ``rm -f PATH``,
  a directory (``os.rmdir``, ``Dir.rmdir``, ``rmdir``) as ``rmdir PATH``;
* fetching a URL (``urllib.request.urlopen``, ``requests.get``, ``fetch``, ``https.get``,
  ``Net::HTTP.get``, ``LWP::Simple`` ``getstore``, ``file_get_contents("http...")``) as
  ``curl URL``;
* running a shell command (``os.system``, ``os.popen``, ``subprocess.*``, ``execSync``/``exec``,
  ``system``, backticks, ``%x()``, ``qx()``, ``shell_exec``...) reads as that command, a list
  of arguments (``subprocess.run(["rm", "-rf", "/"])``, ``spawnSync("rm", ["-rf", "/"])``) as
  those words.

An argument that is a plain string literal is read as its value; any other (a variable, an
f-string, a concatenation) is an expansion known only at run time, matched as ``$VAR`` is.
Code that builds code at run time (``exec``, ``eval``, ``compile``, ``__import__``,
``getattr``, base64 or character-code decoding, ``new Function``...) is *opaque*: what it does
cannot be told, and a policy with ``hookbus.limits.unreadableCode: unjudged`` counts it as a
command that cannot be judged. Code from a pipe or a file is not in the command at all.

Each call is read from a bounded window of the code, so the work is linear in its length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from bus.rules.shellwords import Word

#: Interpreter programs (``python3.12`` and ``pypy3`` are recognised by pattern) and their language.
INTERPRETERS: Final = {
    **dict.fromkeys(("python", "python2", "python3", "pypy", "pypy3"), "py"),
    **dict.fromkeys(("node", "nodejs", "bun", "deno"), "js"),
    "ruby": "rb",
    "perl": "pl",
    "php": "php",
}
#: The option letters whose value is code, and those that take another value.
_CODE_OPTIONS: Final = {"py": "c", "js": "ep", "rb": "e", "pl": "eE", "php": "r"}
_VALUE_OPTIONS: Final = {"py": "WXQ", "js": "r", "rb": "IrCEFx", "pl": "IMmx", "php": "dcz"}
_LONG_CODE: Final = frozenset({"--eval", "--print", "--command"})
#: Options with which an interpreter only says something about itself.
_INFO: Final = frozenset({"-v", "-V", "--version", "-h", "--help", "-VV", "-vv", "--check"})
#: How far an argument list is read past its call, and how many calls one script has read.
_ARG_WINDOW: Final = 4096
MAX_CALLS: Final = 64

_RMRF, _RMF, _RMDIR, _SHELL, _FETCH = "rm -rf", "rm -f", "rmdir", "sh", "curl"
_CALLS: Final = {
    "py": {
        **dict.fromkeys(
            (
                "urlopen",
                "urlretrieve",
                "requests.get",
                "requests.post",
                "requests.put",
                "requests.delete",
                "requests.request",
                "httpx.get",
                "httpx.post",
            ),
            _FETCH,
        ),
        **dict.fromkeys(("shutil.rmtree", "rmtree"), _RMRF),
        **dict.fromkeys(("os.remove", "os.unlink", "unlink"), _RMF),
        **dict.fromkeys(("os.rmdir", "os.removedirs", "rmdir", "removedirs"), _RMDIR),
        **dict.fromkeys(
            (
                "os.system",
                "os.popen",
                "system",
                "subprocess.run",
                "subprocess.call",
                "subprocess.check_call",
                "subprocess.check_output",
                "subprocess.Popen",
                "subprocess.getoutput",
                "subprocess.getstatusoutput",
                "check_output",
                "check_call",
                "getoutput",
                "Popen",
                "pty.spawn",
            ),
            _SHELL,
        ),
    },
    "js": {
        **dict.fromkeys(
            ("fetch", "http.get", "https.get", "http.request", "https.request", "axios.get", "axios.post"), _FETCH
        ),
        **dict.fromkeys(("rmSync", "rmdirSync", "rm", "rmdir", "remove", "removeSync", "rimraf", "rimrafSync"), _RMRF),
        **dict.fromkeys(("unlinkSync", "unlink"), _RMF),
        **dict.fromkeys(
            ("execSync", "exec", "spawnSync", "spawn", "execFileSync", "execFile", "Bun.spawn", "Bun.spawnSync"),
            _SHELL,
        ),
    },
    "rb": {
        **dict.fromkeys(("Net::HTTP.get", "Net::HTTP.get_response", "URI.open"), _FETCH),
        **dict.fromkeys(("rm_rf", "rm_r", "remove_dir", "remove_entry", "remove_entry_secure", "rmtree"), _RMRF),
        **dict.fromkeys(("rm", "rm_f", "File.delete", "File.unlink", "safe_unlink"), _RMF),
        **dict.fromkeys(("Dir.rmdir", "Dir.delete", "Dir.unlink", "rmdir"), _RMDIR),
        **dict.fromkeys(
            ("system", "exec", "spawn", "IO.popen", "popen", "capture2", "capture2e", "capture3", "popen3"), _SHELL
        ),
    },
    "pl": {
        **dict.fromkeys(("getstore", "getprint", "LWP::Simple::get"), _FETCH),
        **dict.fromkeys(("rmtree", "remove_tree"), _RMRF),
        "unlink": _RMF,
        "rmdir": _RMDIR,
        **dict.fromkeys(("system", "exec"), _SHELL),
    },
    "php": {
        **dict.fromkeys(("file_get_contents", "fopen", "curl_init"), _FETCH),
        "unlink": _RMF,
        "rmdir": _RMDIR,
        **dict.fromkeys(("system", "exec", "shell_exec", "passthru", "popen", "proc_open"), _SHELL),
    },
}
_CALL_RES: Final = {
    language: re.compile(
        r"(?<![\w$])("
        + "|".join(re.escape(name) for name in sorted(calls, key=len, reverse=True))
        + (r")(?![\w$])(?:\s*+\(\s*+|[ \t]++)" if language in ("rb", "pl") else r")(?![\w$])\s*+\(\s*+")
    )
    for language, calls in _CALLS.items()
}
#: ``Path('/x').unlink()`` and the like: the path comes before the call.
_PATH_CALL: Final = re.compile(
    r"Path\(\s*('(?:[^'\\\n]|\\.)*+'|\"(?:[^\"\\\n]|\\.)*+\")\s*\)\s*\.\s*(unlink|rmdir|rmtree)\("
)
#: Commands in backticks, ``%x()``, ``qx()``: their text is a shell command.
_BACKTICKS: Final = {
    "rb": re.compile(r"`([^`]{0,4096})`|%x\(([^)]{0,4096})\)|%x\{([^}]{0,4096})\}"),
    "pl": re.compile(r"`([^`]{0,4096})`|qx\(([^)]{0,4096})\)|qx\{([^}]{0,4096})\}|qx/([^/]{0,4096})/"),
    "php": re.compile(r"`([^`]{0,4096})`"),
}
_OPAQUE: Final = {
    "py": re.compile(
        r"\b(?:exec|eval|compile|__import__|getattr|importlib|b64decode|a85decode|b32decode|"
        r"fromhex|marshal|pickle|codecs|chr|globals|locals|vars)\b"
    ),
    "js": re.compile(
        r"\b(?:eval|Function|fromCharCode|fromCodePoint|atob|vm|import|base64|globalThis|Reflect)\b"
        r"|require\s*\(\s*[^'\"\s]"
    ),
    "rb": re.compile(
        r"\b(?:eval|instance_eval|class_eval|module_eval|send|public_send|const_get|Base64|unpack1?|"
        r"pack|method)\b"
    ),
    "pl": re.compile(r"\b(?:eval|decode_base64|pack|unpack|chr|sprintf|do|require)\b|&\$|&\{"),
    "php": re.compile(
        r"\b(?:eval|assert|create_function|base64_decode|str_rot13|chr|call_user_func\w*|"
        r"gzinflate|preg_replace)\b|\$\w+\s*\("
    ),
}
_STRING: Final = re.compile(r"""([rbufRBUF]{0,2})('(?:[^'\\\n]|\\.)*+'|"(?:[^"\\\n]|\\.)*+"|`(?:[^`\\]|\\.)*+`)""")


@dataclass(frozen=True, slots=True)
class CodeReading:
    """What some interpreter code does: commands (their words), shell scripts it runs (``None``
    for one known only at run time) and whether it builds code at run time."""

    commands: tuple[tuple[Word, ...], ...] = ()
    scripts: tuple[str | None, ...] = ()
    opaque: bool = False


def read_code(words: tuple[Word, ...], stdin: str | None) -> CodeReading:
    """What an interpreter command (``python3 -c CODE``, ``node -e CODE``, ``perl`` fed a script
    on standard input...) does; nothing for a script file or a module it runs."""
    name = words[0].value
    language = INTERPRETERS.get(name, "py")
    codes: list[Word] = []
    i, n = 1, len(words)
    while i < n:
        value = words[i].value
        i += 1
        if value == "--" or not value.startswith("-") or value == "-":
            if value != "-" and value != "--" and not (language == "js" and name == "deno" and value == "eval"):
                break  # a script file (or a module: ``python -m``), not in the command
            if name == "deno" and value == "eval" and i < n:
                codes.append(words[i])
                break
            continue
        if value.startswith("--"):
            option, _, attached = value.partition("=")
            if option in _LONG_CODE:
                if attached:
                    codes.append(Word(attached, attached, words[i - 1].dynamic))
                elif i < n:
                    codes.append(words[i])
                    i += 1
            continue
        for k, letter in enumerate(value[1:], start=2):
            if letter in _CODE_OPTIONS[language]:
                rest = value[k:]
                if rest:
                    codes.append(Word(rest, rest, words[i - 1].dynamic))
                elif i < n:
                    codes.append(words[i])
                    i += 1
                break
            if letter in _VALUE_OPTIONS[language] or (language == "py" and letter == "m"):
                if language == "py" and letter == "m":
                    return CodeReading()  # ``python -m module``: the module's code is elsewhere
                i += 0 if value[k:] else 1
                break
        if language == "py" and codes:
            break  # python stops reading options after -c
    else:
        if not codes and not any(word.value in _INFO for word in words[1:]):  # code on standard input
            return read_source(language, stdin) if stdin is not None else CodeReading(scripts=(None,))
    if not codes:
        return CodeReading()
    if any(code.dynamic for code in codes):
        return CodeReading(scripts=(None,))
    return read_source(language, "\n".join(code.value for code in codes))


def read_source(language: str, code: str) -> CodeReading:
    """The readings of ``code`` in ``language`` (``py``, ``js``, ``rb``, ``pl`` or ``php``)."""
    commands: list[tuple[Word, ...]] = []
    scripts: list[str | None] = []
    calls = _CALLS[language]
    for found in _CALL_RES[language].finditer(code):
        if len(commands) + len(scripts) >= MAX_CALLS:
            scripts.append(None)
            break
        action = calls[found.group(1)]
        args, listed = _arguments(language, code, found.end())
        if action == _FETCH:
            if args[0].dynamic or "://" in args[0].value:  # a local file read is no fetch
                commands.append((Word(action, action), args[0]))
        elif action != _SHELL:
            commands.append((*(Word(w, w) for w in action.split()), args[0]))
        elif listed:
            commands.append(tuple(args))
        else:
            scripts.append(None if args[0].dynamic else args[0].value)
    for found in _PATH_CALL.finditer(code):
        action = {"unlink": _RMF, "rmdir": _RMDIR, "rmtree": _RMRF}[found.group(2)]
        path = _literal(language, "", found.group(1))
        commands.append((*(Word(w, w) for w in action.split()), path))
    backticks = _BACKTICKS.get(language)
    if backticks is not None:
        for found in backticks.finditer(code):
            text = next(group for group in found.groups() if group is not None)
            interpolated = "#{" in text if language == "rb" else "$" in text
            scripts.append(None if interpolated else text)
    opaque = _OPAQUE[language].search(code) is not None
    return CodeReading(tuple(commands), tuple(scripts), opaque)


_BLANKS: Final = re.compile(r"\s*+")
_COMMA: Final = re.compile(r"\s*+,\s*+")
_CLOSE: Final = re.compile(r"\s*+\]")
_JOINED: Final = re.compile(r"\s*+[-+%.*\[]")
_EXPR: Final = Word("<expr>", "<expr>", True)


def _arguments(language: str, code: str, at: int) -> tuple[list[Word], bool]:
    """The leading literal arguments of a call whose arguments start at ``at``, and whether they
    are a list of words (several strings, or a ``[...]`` list) rather than one command line; an
    argument that is not a string literal ends them as an expansion. Read within a bounded window."""
    end = min(len(code), at + _ARG_WINDOW)
    words: list[Word] = []
    listed = False
    pos = _BLANKS.match(code, at, end).end()  # type: ignore[union-attr]
    while pos < end and len(words) < MAX_CALLS:
        if code.startswith("[", pos):
            listed = True
            pos = _BLANKS.match(code, pos + 1, end).end()  # type: ignore[union-attr]
            while (item := _STRING.match(code, pos, end)) is not None and len(words) < MAX_CALLS:
                words.append(_literal(language, item.group(1), item.group(2)))
                comma = _COMMA.match(code, item.end(), end)
                pos = item.end() if comma is None else comma.end()
            close = _CLOSE.match(code, pos, end)
            if close is None:
                words.append(_EXPR)
                return words, listed
            pos = close.end()
        else:
            item = _STRING.match(code, pos, end)
            if item is None:
                break
            word = _literal(language, item.group(1), item.group(2))
            if _JOINED.match(code, item.end(), end):  # a concatenation, formatting, an index
                word = Word(word.raw, word.value, True)
            words.append(word)
            pos = item.end()
        comma = _COMMA.match(code, pos, end)
        if comma is None or words[-1].dynamic:
            break
        pos = comma.end()
    if not words:
        return [_EXPR], False
    return words, listed or len(words) > 1


def _literal(language: str, prefix: str, quoted: str) -> Word:
    """A string literal's value; an expansion when it interpolates (an f-string, ``${}``, ``#{}``...)."""
    body = quoted[1:-1]
    value = re.sub(r"\\(.)", r"\1", body)
    dynamic = "f" in prefix.lower() or (quoted[0] == "`" and language == "js" and "${" in body)
    if quoted[0] == '"' and language in ("rb", "pl", "php"):
        dynamic = dynamic or "#{" in body or (language != "rb" and "$" in body)
    return Word(value, value, dynamic)


__all__ = ["INTERPRETERS", "MAX_CALLS", "CodeReading", "read_code", "read_source"]
