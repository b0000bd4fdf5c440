"""The ledger home: where the configuration, database, store and private keys of one ledger live."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import secrets
import socket
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3

from ledger.atomic import write_atomic
from ledger.errors import ConfigError, HomeNotInitialisedError, InputError, StorageError

if TYPE_CHECKING:
    from ledger.signing import SigningKey
    from ledger.store import FilesystemStore
    from ledger.store.s3 import S3Store

__all__ = [
    "DEFAULT_HOME",
    "Home",
    "ReceiptsRead",
    "WitnessConfig",
    "absolute_database_url",
    "absolute_store",
    "relative_database_url",
    "relative_store",
    "relative_to_home",
    "resolve_home",
]

CONFIG_NAME = "ledger.toml"
_KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")


def _default_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "evidence-ledger"


DEFAULT_HOME = _default_home()


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    """``--home`` wins, then ``LEDGER_HOME``, then ``$XDG_DATA_HOME/evidence-ledger``."""
    if home:
        return Path(home).expanduser().resolve()
    env = os.environ.get("LEDGER_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return _default_home()


# The one definition of the paths a home's configuration names: the SQLite database of a plain
# ``sqlite:///PATH`` URL and a store folder. In ``ledger.toml`` a path inside the home is relative to the home
# (a copy, ``cp -a``, is a ledger of its own that writes only into itself), one outside it is absolute; a
# relative path the user gives ``ledger init`` is relative to the current directory, as typed.
_SQLITE = "sqlite:///"


def _sqlite_path(url: str) -> str | None:
    """The file path of a ``sqlite:///PATH`` URL (query options left on); None for another URL or memory."""
    if not url.startswith(_SQLITE) or url == _SQLITE or url.startswith(_SQLITE + ":"):
        return None
    return url.removeprefix(_SQLITE)


def _is_folder(store: str) -> bool:
    return "://" not in store


def absolute_database_url(url: str, base: Path) -> str:
    """``url`` with a relative SQLite file path made absolute against ``base`` (other URLs as given)."""
    path = _sqlite_path(url)
    if path is None or Path(path).is_absolute():
        return url
    return _SQLITE + os.path.abspath(Path(base) / path)


def absolute_store(store: str, base: Path) -> str:
    """``store`` (a folder or an ``s3://`` URL) with a relative folder made absolute against ``base``."""
    if not _is_folder(store) or Path(store).is_absolute():
        return store
    return os.path.abspath(Path(base) / store)


def relative_to_home(path: Path, home: Path) -> str | None:
    """``path`` relative to ``home`` when it lies inside it (symbolic links followed), else None."""
    try:
        return Path(path).resolve().relative_to(Path(home).resolve()).as_posix()
    except ValueError:
        return None


def relative_database_url(url: str, home: Path) -> str:
    """``url`` as ``ledger.toml`` keeps it: a SQLite file inside ``home`` relative to it, else as given."""
    path = _sqlite_path(url)
    if path is None or not Path(path).is_absolute():
        return url
    rel = relative_to_home(Path(path), home)
    return url if rel is None else _SQLITE + rel


def relative_store(store: str, home: Path) -> str:
    """``store`` as ``ledger.toml`` keeps it: a folder inside ``home`` relative to it, else as given."""
    if not _is_folder(store) or not Path(store).is_absolute():
        return store
    rel = relative_to_home(Path(store), home)
    return store if rel is None else rel


@dataclass(frozen=True)
class WitnessConfig:
    """A witness the log submits its checkpoints to (``[[witness]]`` in ledger.toml): its add-checkpoint
    URL prefix and its cosignature/v1 verifier key."""

    url: str
    vkey: str


@dataclass(frozen=True)
class HomeConfig:
    origin: str
    database_url: str
    store: str
    log_key: str
    root_key_id: str
    admin_key: str
    witnesses: tuple[WitnessConfig, ...] = ()
    # the size of the home's own log when it began keeping receipts (``receipts.jsonl``): the entries below
    # it were logged by a ledger that kept none (a home upgraded from log format 1 by ``ledger migrate``),
    # so ``ledger audit`` expects no receipt of them; 0 (a home made by this ledger): every entry has one
    receipts_from: int = 0


_ANCHOR = 4096  # the bytes a read of receipts.jsonl keeps of what it read last (``ReceiptsRead.anchor``)
# A file whose status changed less than this long before it was read may change again unseen by its status
# (a timestamp is as coarse as the kernel's clock tick, or a file system's granularity): such a read keeps
# no ``ReceiptsRead.stat``, and the next one checks the bytes read (``ReceiptsRead.digest``).
_RACY_NS = 2_000_000_000

_Stat = tuple[int, int, int, int]  # st_ino, st_size, st_mtime_ns, st_ctime_ns


def _stat_of(st: os.stat_result) -> _Stat:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class ReceiptsRead:
    """Where a read of ``receipts.jsonl`` ended (``Home.receipts_since``): the file (``inode``), the byte
    after its last whole line read (``offset``), the bytes just before it (``anchor``, up to 4 KiB: a cheap
    first look), the BLAKE3 of every byte before it (``hasher``: ``digest``) and the file's status when it
    was read (``stat``: inode, size, mtime and ctime in ns; None where it changed too shortly before the
    read to be trusted, ``_RACY_NS``). A file whose status is still ``stat`` is unchanged (no write leaves
    its ctime as it was); else it was only appended to when the bytes before ``offset`` still hash to
    ``digest`` — an edit in place anywhere before it, whatever its length and last 4 KiB, is seen.
    ``restarted``: this read began again at byte 0, the file the earlier one read being gone, replaced or
    rewritten."""

    inode: int
    offset: int
    anchor: bytes
    restarted: bool = False
    stat: _Stat | None = None
    hasher: Any = dataclasses.field(default=None, compare=False, repr=False)  # blake3 of [0, offset)

    @property
    def digest(self) -> bytes | None:
        """The BLAKE3 of the bytes before ``offset`` as read; None when not known (then never continued)."""
        return None if self.hasher is None else bytes(self.hasher.digest())


class Home:
    """Paths and configuration of one ledger home."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_NAME

    @property
    def keys_dir(self) -> Path:
        return self.path / "keys"

    @property
    def spool_dir(self) -> Path:
        return self.path / "spool"

    @property
    def receipts_path(self) -> Path:
        """The receipts the logs this home appended to signed (JSON lines; ``ledger audit`` reads them)."""
        return self.path / "receipts.jsonl"

    def keep_receipts(self, receipts: list[dict[str, Any]]) -> None:
        """Append receipts durably, whole lines or none: every byte written, then fsync, under a lock of the
        file (the processes of one home append in turn); a crash loses none it returned. A write that
        cannot be completed (disk full, a file size limit) is cut back to the last whole line and is
        ``StorageError``: a torn line would have glued the next receipts onto it, and ``ledger audit``
        refuses such a file whole. A torn last line an earlier crash left (never a whole receipt) is cut
        before anything is appended."""
        if not receipts:
            return
        data = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in receipts).encode()
        try:
            fd = os.open(self.receipts_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"{self.receipts_path}: cannot be opened to keep receipts ({e})") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            end = _whole_lines_end(fd)
            try:
                if end != size:
                    tail = os.pread(fd, size - end, end)
                    if _whole_line(tail):  # a last line without its newline: kept, ended
                        data, end = b"\n" + data, size
                    else:  # a torn write: never a whole receipt
                        os.ftruncate(fd, end)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as e:
                with contextlib.suppress(OSError):  # nothing half-way: back to the last whole line
                    os.ftruncate(fd, end)
                    os.fsync(fd)
                raise StorageError(
                    f"{self.receipts_path}: {len(receipts)} receipt(s) could not be kept "
                    f"({e.strerror or e}); nothing of them is left in it"
                ) from e
        finally:
            os.close(fd)  # releases the lock

    def receipts(self) -> list[dict[str, Any]]:
        """The kept receipts, oldest first; a line that is not JSON (a torn last write) is refused."""
        if not self.receipts_path.is_file():
            return []
        return self._receipt_lines(self.receipts_path.read_bytes().splitlines(), lambda n: f":{n}")

    def receipts_since(self, read: ReceiptsRead | None = None) -> tuple[list[dict[str, Any]], ReceiptsRead]:
        """The receipts kept in ``receipts.jsonl`` after ``read`` (what an earlier call returned; None: from
        the start), and where this read ended: a process reads the file once, then only what was appended
        (``keep_receipts`` only appends). A file that is not the one ``read`` ended in — another inode, or
        the same one rewritten in place (``truncate -s0``, ``: >``, ``cp other``): shorter than where
        ``read`` ended, or other bytes just before it — is read again from the start, and the read returned
        says so (``restarted``: the caller drops what it read of it before). Nothing when there is no file.

        The lines are read as ``receipts`` reads the whole file (one reading): blank lines skipped, every
        other line a receipt; a last line without its newline is a receipt when it is a whole JSON object
        (``keep_receipts`` keeps it so), returned again by each call until its newline comes, and a torn
        one (no whole JSON object: a write under way) is read once it is whole. A line that is not a
        receipt is ``ConfigError`` naming its byte offset."""
        try:
            with self.receipts_path.open("rb") as f:
                st = os.fstat(f.fileno())
                now = time.time_ns()
                go_on = read is not None and _continues(f.fileno(), _stat_of(st), read)
                start = read.offset if read is not None and go_on else 0
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return [], ReceiptsRead(0, 0, b"", restarted=read is not None, hasher=blake3.blake3())
        except OSError as e:
            raise ConfigError(f"{self.receipts_path}: cannot be read ({e})") from e
        end = data.rfind(b"\n") + 1
        lines = data[:end].splitlines(keepends=True)
        if _whole_line(data[end:]):  # blank, or a whole receipt without its newline (not a write under way)
            lines.append(data[end:])
        starts = [start]
        for line in lines[:-1]:
            starts.append(starts[-1] + len(line))
        docs = self._receipt_lines(
            [line.rstrip(b"\r\n") for line in lines], lambda n: f" (byte {starts[n - 1]})"
        )
        before = read.anchor if read is not None and go_on else b""
        hasher = read.hasher.copy() if read is not None and go_on else blake3.blake3()
        hasher.update(data[:end])
        # trusted next time only when it changed well before this read and nothing was read past its size
        settled = max(st.st_mtime_ns, st.st_ctime_ns) < now - _RACY_NS and start + len(data) == st.st_size
        return docs, ReceiptsRead(
            st.st_ino,
            start + end,
            (before + data[:end])[-_ANCHOR:],
            restarted=read is not None and not go_on,
            stat=_stat_of(st) if settled else None,
            hasher=hasher,
        )

    def _receipt_lines(self, lines: list[bytes], where: Callable[[int], str]) -> list[dict[str, Any]]:
        """Each line a receipt (a JSON object), blank lines skipped; ``where(n)`` names line ``n``."""
        out: list[dict[str, Any]] = []
        for n, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(
                    f"{self.receipts_path}{where(n)}: not a receipt (not UTF-8 text: byte "
                    f"0x{raw[e.start]:02x} at column {e.start + 1})"
                ) from e
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as e:
                raise ConfigError(f"{self.receipts_path}{where(n)}: not a receipt ({e})") from e
            if not isinstance(doc, dict):
                raise ConfigError(f"{self.receipts_path}{where(n)}: not a receipt")
            out.append(doc)
        return out

    @property
    def checkpoint_path(self) -> Path:
        """The newest signed checkpoint of the home's own log this home published or read (a C2SP signed
        note): the anchor ``ledger verify`` and ``ledger audit`` check the database against, outside it."""
        return self.path / "checkpoint"

    def held_checkpoint(self) -> str | None:
        """The signed note of the checkpoint this home holds, or None when it holds none yet."""
        try:
            return self.checkpoint_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{self.checkpoint_path}: unreadable ({e})") from e

    @contextlib.contextmanager
    def checkpoint_lock(self) -> Iterator[None]:
        """Held while the held checkpoint is read, compared and replaced: two processes of one home never
        replace a newer checkpoint with an older one."""
        fd = os.open(self.path / ".checkpoint.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def hold_checkpoint(self, note: str) -> None:
        """Replace the held checkpoint (atomically: a crash leaves the old one or the new one). The caller
        holds ``checkpoint_lock`` and has checked that the new one extends the one held."""
        write_atomic(self.checkpoint_path, note.encode("utf-8"))

    def exists(self) -> bool:
        return self.config_path.is_file()

    def config(self, *, relocate: bool = False) -> HomeConfig:
        """The home's configuration, paths absolute. A path an older ledger wrote absolute that lies in
        another home this one is a copy of (``cp -a`` of a home made before paths were kept relative), or
        in a folder that is gone while this home holds the same file (a home moved), is refused
        (``ConfigError``): this home would read and write the other home's log. ``relocate``: use this
        home's own file instead (``ledger migrate --relocate``, which then keeps it relative)."""
        cfg = self._read_config()
        moved: dict[str, str] = {}
        db = (
            cfg.database_url.removeprefix("sqlite:///") if cfg.database_url.startswith("sqlite:///") else None
        )
        for name, value in (("database_url", db), ("store", cfg.store if _is_folder(cfg.store) else None)):
            if value is None:
                continue
            own = self._own_copy_of(Path(value))
            if own is None:
                continue
            if not relocate:
                raise ConfigError(
                    f"{self.config_path}: {name} names {value}, which is not this home's but {own[1]} — this "
                    "home is a copy (or a move) of a home made before paths were kept relative to it, and "
                    "would read and write the other home's log",
                    hint="run `ledger migrate --relocate` on this home to use its own files "
                    "(then `ledger verify`)",
                )
            moved[name] = f"sqlite:///{own[0]}" if name == "database_url" else str(own[0])
        if not moved:
            return cfg
        return dataclasses.replace(
            cfg, database_url=moved.get("database_url", cfg.database_url), store=moved.get("store", cfg.store)
        )

    def _own_copy_of(self, path: Path) -> tuple[Path, str] | None:
        """This home's own file standing for ``path`` — an absolute path outside this home, inside another
        home's folder (one holding a ledger.toml) or in a folder that is gone — with what ``path`` is
        instead; None when ``path`` is this home's, or this home holds no such file."""
        if not path.is_absolute() or relative_to_home(path, self.path) is not None:
            return None
        for root in list(path.parents)[:4]:
            if (root / CONFIG_NAME).is_file():
                mine = self.path / path.relative_to(root)
                return (mine, f"in the home at {root}") if mine.exists() else None
        if not path.exists() and (self.path / path.name).exists():
            return self.path / path.name, "gone (the home was moved)"
        return None

    def _read_config(self) -> HomeConfig:
        if not self.exists():
            raise HomeNotInitialisedError(f"no ledger at {self.path}")
        try:
            data = tomllib.loads(self.config_path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{self.config_path}: {e}") from e
        try:
            return HomeConfig(
                origin=str(data["origin"]),
                database_url=self._absolute_url(str(data["database_url"])),
                store=self._absolute_store(str(data["store"])),
                log_key=str(data["log_key"]),
                root_key_id=str(data["root_key_id"]),
                admin_key=str(data.get("admin_key", "admin")),
                witnesses=tuple(
                    WitnessConfig(url=str(w["url"]), vkey=str(w["vkey"])) for w in data.get("witness", [])
                ),
                receipts_from=_count(data.get("receipts_from", 0), "receipts_from", self.config_path),
            )
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{self.config_path}: missing setting {e}") from e

    # Paths inside the home are kept relative to it, so a copy of the home (``cp -a``) is a ledger of its
    # own that writes only into itself; paths outside it (and other databases) are kept absolute, as given.
    def _absolute_url(self, url: str) -> str:
        return absolute_database_url(url, self.path)

    def _absolute_store(self, store: str) -> str:
        return absolute_store(store, self.path)

    def _relative(self, cfg: HomeConfig) -> dict[str, str]:
        out = {k: v for k, v in cfg.__dict__.items() if k not in ("witnesses", "receipts_from")}
        out["database_url"] = relative_database_url(cfg.database_url, self.path)
        out["store"] = relative_store(cfg.store, self.path)
        return out

    def write_config(self, cfg: HomeConfig) -> None:
        """Write the configuration, paths inside the home relative to it (a copied home stays itself)."""
        lines = [f"{k} = {json.dumps(v)}" for k, v in self._relative(cfg).items()]
        if cfg.receipts_from:
            lines.append(f"receipts_from = {cfg.receipts_from}")
        for w in cfg.witnesses:
            lines += ["", "[[witness]]", f"url = {json.dumps(w.url)}", f"vkey = {json.dumps(w.vkey)}"]
        text = "# evidence ledger home configuration\n" + "\n".join(lines) + "\n"
        write_atomic(self.config_path, text.encode())

    @staticmethod
    def new_origin() -> str:
        return f"evidence-ledger/{socket.gethostname()}/{secrets.token_hex(4)}"

    def key_path(self, name: str) -> Path:
        if not _KEY_NAME.fullmatch(name):
            raise InputError(f"invalid key name {name!r}: letters, digits, and _.@- only")
        return self.keys_dir / f"{name}.key"

    def load_key(self, name: str) -> SigningKey:
        from ledger.signing import SigningKey

        return SigningKey.load(name, self.key_path(name))

    def open_store(self) -> FilesystemStore | S3Store:
        """The home's artifact store alone, without the database (``put`` and ``cat`` need no more)."""
        from ledger.store import open_store

        return open_store(self.config().store)

    def has_key(self, name: str) -> bool:
        return self.key_path(name).is_file()


def _whole_lines_end(fd: int) -> int:
    """The size of the file ``fd`` up to and with its last newline (0 when it has none): where a torn last
    line, a write cut short, begins."""
    size = os.fstat(fd).st_size
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0


def _continues(fd: int, stat: _Stat, read: ReceiptsRead) -> bool:
    """Whether the open file ``fd`` (its ``stat``: inode, size, mtime, ctime) is the one ``read`` ended in,
    only appended to since: the same inode, at least as long, and either its status unchanged since the
    read (``ReceiptsRead.stat``: no write leaves a file's ctime as it was) or every byte before where the
    read ended the same (the bytes just before it first, then the BLAKE3 of all of them: an edit in place
    anywhere is seen, whatever its length). A read whose digest is not known is never continued."""
    inode, size = stat[0], stat[1]
    if inode != read.inode or size < read.offset or read.digest is None:
        return False
    if read.stat is not None and stat == read.stat:
        return True
    start = read.offset - len(read.anchor)
    if os.pread(fd, len(read.anchor), start) != read.anchor:
        return False
    hasher = blake3.blake3()
    done = 0
    while done < read.offset:
        chunk = os.pread(fd, min(1 << 20, read.offset - done), done)
        if not chunk:
            return False
        hasher.update(chunk)
        done += len(chunk)
    return bytes(hasher.digest()) == read.digest


def _whole_line(raw: bytes) -> bool:
    """Whether ``raw`` (a last line without its newline) is blank or a whole JSON object."""
    if not raw.strip():
        return True
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


def _count(value: object, name: str, path: Path) -> int:
    """A non-negative integer setting; anything else (a string, a bool, a float) is ``ConfigError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{path}: {name} = {value!r} is not a non-negative integer")
    return value
