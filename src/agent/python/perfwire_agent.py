#!/usr/bin/env python3
r"""perfwire-agent in one file: profile a process with perf and stream it to a perfwire collector.

The C++ agent of src/agent/ -- same flags, hello, commands, pairing rules, health metrics and
data chunks -- for devices where a Python 3.5+ interpreter is easier to bring than a binary.
Standard library only.

The wire (docs/protocol.md, version 1) is one TCP stream of frames:

    0        4    5
    +--------+----+------------------+
    |  LEN   |FLAG|  payload (LEN)   |     LEN: unsigned 32-bit big-endian; FLAG: one byte
    +--------+----+------------------+

    FLAG 0  agent -> collector   perf script text [+ "\n### PERF_STAT ###\n" + perf stat report]
    FLAG 1  agent -> collector   the same, as one zstd frame
    FLAG 2  collector -> agent   command {"id":"...","cmd":"...","args":{...}}
    FLAG 3  agent -> collector   the hello (first frame), command responses, state notices
    FLAG 4  agent -> collector   one health-metrics object, discriminated by "type"

A zero-length frame is a keep-alive; the agent accepts frames of up to 1 MiB.

Data chunks are compressed by the `zstandard` module when it is importable, else by a `zstd`
executable on PATH (both flag 1), else sent as text (flag 0).
PERFWIRE_PY_COMPRESSION=zstandard|zstd|none forces one of them.
"""

import binascii
import collections
import copy
import errno
import hashlib
import hmac
import json
import math
import os
import platform
import random
import re
import select
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
try:
    import ssl  # a device's Python may be built without it: TLS is then refused, clearly
except ImportError:
    ssl = None

try:
    import ctypes
except ImportError:  # a minimal interpreter: children then lack PR_SET_PDEATHSIG
    ctypes = None

VERSION = "0.1.0"  # PERFWIRE_VERSION, the project version in the top-level CMakeLists.txt
PROTOCOL_VERSION = 1
# This script, resolved at start-up: what an update replaces.
SELF = os.path.realpath(__file__)
MAX_UPDATE_SIZE = 64 << 20
MAX_UPDATE_PIECE = 384 << 10  # decoded bytes per update_data (base64 in a 1 MiB frame)
# How long past the end of its workload a perf record may run before it is stopped as a stop
# would stop it (one that ignores `-- sleep`): generous, perf on a busy device starts slowly.
OVERRUN_GRACE = 10.0
RESTART_EXIT_CODE = 75  # a new build is in place; a supervisor restarts into it
monotonic = time.monotonic
_log_lock = threading.RLock()  # reentrant: the signal handler logs too


def log(what):
    with _log_lock:
        try:
            sys.stderr.write("perfwire-agent: %s\n" % what)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def seconds_text(value):
    """A duration as the C++ agent prints it: std::to_string(x).substr(0, 4)."""
    return ("%f" % value)[:4]


def start_thread(target, name=None, args=()):
    t = threading.Thread(target=target, name=name, args=args)
    t.daemon = True
    t.start()
    return t


def os_message(e):
    """The reason in an OSError, as strerror words ("Connection refused")."""
    return getattr(e, "strerror", None) or str(e)


def peer_text(sock):
    try:
        address = sock.getpeername()
    except OSError:
        return "unknown"
    return "%s:%d" % address[:2] if isinstance(address, tuple) else "unknown"


# ================================================================================ framing

FLAG_TEXT, FLAG_ZSTD, FLAG_COMMAND, FLAG_RESPONSE, FLAG_METRICS, FLAG_SEQUENCED = range(6)
FLAG_NAMES = ("text", "zstd", "command", "response", "metrics", "sequenced")
HEADER = struct.Struct(">IB")
AGENT_MAX_FRAME = 1 << 20


class FrameDecoder(object):
    """Bytes in, whole frames out, keep-alives skipped. Length and flag are checked as soon as a
    header is in; after an error (`self.error`) further input is ignored."""

    def __init__(self, max_payload):
        self.max_payload, self.buf, self.error = max_payload, bytearray(), None

    def feed(self, data):
        frames = []
        if self.error:
            return frames
        self.buf += data
        pos = 0
        while len(self.buf) - pos >= HEADER.size:
            length, flag = HEADER.unpack_from(self.buf, pos)
            if flag > FLAG_METRICS:
                self.error = "unknown frame flag"
                break
            if length > self.max_payload:
                self.error = "frame length exceeds limit"
                break
            start = pos + HEADER.size
            if len(self.buf) - start < length:
                break
            if length:
                frames.append((flag, bytes(self.buf[start:start + length])))
            pos = start + length
        del self.buf[:pos]
        return frames


# ================================================================================ messages


def to_json(value):
    # Compact like Boost.JSON; lone surrogates (from odd input) become \uXXXX escapes.
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace")


def response(req_id, fields=None, error=None):
    """{"id":..,"ok":..,["error":..,] fields...}; fields never override id/ok/error."""
    out = {"id": req_id, "ok": error is None}
    if error is not None:
        out["error"] = error
    for key, value in (fields or {}).items():
        out.setdefault(key, value)
    return out


def parse_command(payload):
    """(request, None) or (None, error) with the C++ parser's wording."""
    try:
        text = payload.decode("utf-8")
        value = json.loads(text)
    except UnicodeDecodeError:
        return None, "invalid JSON: syntax error"
    except ValueError as e:
        at_end = getattr(e, "pos", 0) >= len(text.rstrip())
        return None, "invalid JSON: " + ("incomplete JSON" if at_end else "syntax error")
    if not isinstance(value, dict):
        return None, "invalid JSON: expected a JSON object"
    if not isinstance(value.get("id"), str):
        return None, "invalid message: field 'id' must be a string"
    cmd = value.get("cmd")
    if not isinstance(cmd, str) or not cmd:
        return None, "invalid message: field 'cmd' must be a non-empty string"
    args = value.get("args")
    if args is None:
        args = {}
    elif not isinstance(args, dict):
        return None, "invalid message: field 'args' must be an object"
    return {"id": value["id"], "cmd": cmd, "args": args}, None


MAX_PID = 4194304  # PID_MAX_LIMIT


class BadArgument(Exception):
    """A command argument that is not what the command takes; answered as the error."""


def int_arg(args, key, lo, hi):
    """An integer argument: None when absent or null; BadArgument for anything but a JSON
    integer in [lo, hi] ("12abc", 12.5 and 2**40 are not a pid)."""
    v = args.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadArgument("%s must be an integer from %d to %d" % (key, lo, hi))
    return v


def timing_args(args):
    """A command's (frequency, duration), None for each absent; BadArgument if out of range."""
    return int_arg(args, "frequency", 1, 100000), int_arg(args, "duration", 1, 3600)


def build_arch():
    """The dist/ name of what this interpreter runs as (the C++ agent's compiled-for arch)."""
    m = platform.machine().lower()
    wide = struct.calcsize("P") == 8
    if m in ("x86_64", "amd64"):
        return "x86_64" if wide else "i686"
    if re.match(r"i[3-6]86$|x86$", m):
        return "i686"
    if m in ("aarch64", "arm64", "aarch64_be", "armv8b"):
        return "aarch64" if wide else "armv7"
    if m.startswith("armv7") or m.startswith("armv8"):
        return "armv7"
    if m.startswith("arm"):
        return "arm"
    if m in ("s390x", "riscv64", "ppc64le"):
        return m
    if m.startswith("mips"):
        return "mips"
    return "unknown"


# ================================================================================ compression


class TextBuffer(object):
    """No compression: the chunk is kept as text (flag 0)."""

    def __init__(self):
        self.parts = []

    def write(self, data):
        self.parts.append(data)

    def finish(self):
        out, self.parts = b"".join(self.parts), []
        return out

    def close(self):
        self.parts = []


class ZstandardStream(TextBuffer):
    """One zstd frame per chunk through the zstandard module (level 1, with checksum)."""

    def __init__(self, module):
        TextBuffer.__init__(self)
        self.cctx, self.obj = module.ZstdCompressor(level=1, write_checksum=True), None

    def write(self, data):
        if self.obj is None:
            self.obj = self.cctx.compressobj()
        self.parts.append(self.obj.compress(data))

    def finish(self):
        self.write(b"")
        self.parts.append(self.obj.flush())
        self.obj = None
        return TextBuffer.finish(self)

    def close(self):
        self.parts, self.obj = [], None


class ZstdPipeStream(object):
    """One zstd frame per chunk from `zstd -q -c -1`: text goes in as it arrives, a thread
    collects the compressed output, finish() closes the input and returns the frame."""

    def __init__(self, exe):
        self.exe, self.proc, self.reader, self.out = exe, None, None, []

    def write(self, data):
        if self.proc is None:
            self.proc = spawn([self.exe, "-q", "-c", "-1"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
            self.out = []
            self.reader = start_thread(self._collect, args=(self.proc.stdout, self.out))
        self.proc.stdin.write(data)

    @staticmethod
    def _collect(pipe, out):
        for block in iter(lambda: pipe.read(65536), b""):
            out.append(block)

    def finish(self):
        self.write(b"")  # starts zstd for an empty chunk too
        proc, self.proc = self.proc, None
        proc.stdin.close()
        self.reader.join()
        proc.stdout.close()
        code = proc.wait()
        forget_child(proc)
        if code != 0:
            raise RuntimeError("zstd exited with status %d" % code)
        return b"".join(self.out)

    def close(self):
        if self.proc is not None:
            kill_child(self.proc)
            self.proc = None


Compression = collections.namedtuple("Compression", "name flag make")


def choose_compression():
    """The compressor for data chunks; None with a message when a forced one is missing."""
    forced = os.environ.get("PERFWIRE_PY_COMPRESSION", "").strip().lower()
    if forced not in ("", "zstandard", "zstd", "none"):
        return None, "PERFWIRE_PY_COMPRESSION must be zstandard, zstd or none"
    if forced in ("", "zstandard"):
        try:
            import zstandard
            return Compression("zstandard module %s" % getattr(zstandard, "__version__", "?"),
                               FLAG_ZSTD, lambda: ZstandardStream(zstandard)), None
        except ImportError:
            if forced:
                return None, "PERFWIRE_PY_COMPRESSION=zstandard: cannot import zstandard"
    if forced in ("", "zstd"):
        exe = shutil.which("zstd")
        if exe:
            return Compression("zstd executable %s" % exe, FLAG_ZSTD,
                               lambda: ZstdPipeStream(exe)), None
        if forced:
            return None, "PERFWIRE_PY_COMPRESSION=zstd: no zstd on PATH"
    return Compression("none (text frames)", FLAG_TEXT, TextBuffer), None


# ================================================================================ procfs & metrics

CLK_TCK = os.sysconf("SC_CLK_TCK") or 100  # 100 on every Linux


def read_file(path):
    """The whole file as bytes, or None (process gone, no permission)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, IOError):
        return None


def read_text(path):
    data = read_file(path)
    return None if data is None else data.decode("utf-8", "replace")


def u64(token):
    """Leading decimal digits (after blanks) as an int, else 0 -- like from_chars."""
    m = re.match(r"[ \t\n]*(\d+)", token or "")
    return int(m.group(1)) if m else 0


def to_float(token):
    try:
        return float(token)
    except (TypeError, ValueError):
        return 0.0


def parse_stat(text):
    """/proc/stat; cpu times as (busy, total), busy excluding idle and iowait."""
    out = {"all": (0, 0), "cores": [], "ctxt": 0, "intr": 0, "running": 0, "blocked": 0}
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0].startswith("cpu"):
            v = [u64(x) for x in (f[1:9] + ["0"] * 8)[:8]]
            total = sum(v)
            times = (total - v[3] - v[4], total)
            if f[0] == "cpu":
                out["all"] = times
            elif len(f[0]) > 3:
                out["cores"].append(times)
        elif len(f) > 1 and f[0] in ("ctxt", "intr", "procs_running", "procs_blocked"):
            out[f[0].replace("procs_", "")] = u64(f[1])
    return out


def busy_pct(before, after):
    if after[1] <= before[1] or after[0] < before[0]:
        return 0.0
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


def parse_meminfo(text):
    kb = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep:
            kb[key] = u64(rest.split()[0] if rest.split() else "")
    total = kb.get("MemTotal", 0)
    available = kb["MemAvailable"] if "MemAvailable" in kb else kb.get("MemFree", 0)
    used = total - available if total > available else 0
    swap_total, swap_free = kb.get("SwapTotal", 0), kb.get("SwapFree", 0)
    return {"total_kb": total, "used_kb": used, "available_kb": available,
            "buffers_kb": kb.get("Buffers", 0),
            "cached_kb": kb.get("Cached", 0) + kb.get("SReclaimable", 0),
            "swap_total_kb": swap_total,
            "swap_used_kb": swap_total - swap_free if swap_total > swap_free else 0,
            "used_pct": 100.0 * used / total if total else 0.0}


def parse_uptime(text):
    f = (text or "").split()
    return to_float(f[0]) if f else 0.0


def parse_pid_stat(text):
    """/proc/PID/stat (or task/TID/stat) as a dict; comm sits between '(' and the last ')'."""
    if not text:
        return None
    open_, close = text.find("("), text.rfind(")")
    if open_ < 0 or close < open_:
        return None
    v = text[close + 1:].split()
    if len(v) < 22:
        return None
    return {"pid": u64(text[:open_]), "comm": text[open_ + 1:close], "state": v[0][0],
            "minor_faults": u64(v[7]), "major_faults": u64(v[9]), "utime": u64(v[11]),
            "stime": u64(v[12]), "threads": u64(v[17]), "start_time": u64(v[19]),
            "vsize": u64(v[20]), "rss_pages": u64(v[21])}


def parse_pid_status(text):
    out = {"voluntary_ctxt_switches": 0, "nonvoluntary_ctxt_switches": 0, "VmRSS": 0}
    for line in (text or "").splitlines():
        key, sep, rest = line.partition(":")
        if sep and key in out:
            out[key] = u64(rest)
    return out


def parse_maps_executables(text):
    """Files mapped executable in /proc/PID/maps, sorted, each once; no deleted files."""
    out = set()
    for line in (text or "").splitlines():
        f = line.split(None, 5)
        if len(f) == 6 and len(f[1]) >= 4 and f[1][2] == "x" and f[5].startswith("/") \
                and not f[5].endswith(" (deleted)"):
            out.add(f[5])
    return sorted(out)


def parse_kallsyms(text):
    """/proc/kallsyms: the kernel's text symbols as "ADDRESS NAME" lines (a module's symbols
    without their "[module]"); empty when the kernel hides the addresses (all zero)."""
    out = []
    any_address = False
    for line in (text or "").split("\n"):
        a = line.find(" ")
        if a < 0 or a + 3 >= len(line) or line[a + 2] != " ":
            continue
        if line[a + 1] not in "tTwW":
            continue
        name = line[a + 3:].split("\t", 1)[0]
        address = line[:a]
        if not address.strip("0"):
            continue
        any_address = True
        out.append(address + " " + name + "\n")
    return "".join(out) if any_address else ""


def read_cmdline(pid):
    data = read_file("/proc/%d/cmdline" % pid)
    return data.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace") if data else ""


def pid_exists(pid):
    """Alive for profiling: a zombie that exited but was not reaped does not count."""
    return running_process(pid) is not None


def running_process(pid):
    """The process `pid` now, as (pid, start time); None when it is gone or a zombie. The same
    pid with another start time is another process: the first exited, was reaped, and its pid
    was reused."""
    stat = parse_pid_stat(read_text("/proc/%d/stat" % pid)) if pid and pid > 0 else None
    if stat is None or stat["state"] in "ZX":
        return None
    return pid, stat["start_time"]


def has_exited(process):
    """Whether `process` (from running_process) has exited since it was seen."""
    return running_process(process[0]) != process


def read_perf_event_paranoid():
    text = read_text("/proc/sys/kernel/perf_event_paranoid")
    m = re.match(r"\s*([+-]?\d+)", text or "")
    return int(m.group(1)) if m else (0 if text is not None else 2)


def off_cpu_problem(sys_root="/sys", events=()):
    """Why this device cannot record where threads wait (the sched:sched_switch tracepoint),
    or beside these sampled `events`; "" when it can."""
    paranoid = read_perf_event_paranoid()
    if os.geteuid() != 0 and paranoid > -1:
        return ("off-CPU needs root, or perf_event_paranoid -1 for a tracepoint (it is %d)"
                % paranoid)
    for tracing in ("/kernel/tracing", "/kernel/debug/tracing"):
        if os.access(sys_root + tracing + "/events/sched/sched_switch/format", os.R_OK):
            return off_cpu_events_problem(events)
    return ("off-CPU needs the sched:sched_switch tracepoint, which this kernel does not show "
            "(tracefs is not mounted at %s/kernel/tracing)" % sys_root)


_EVENT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def at_own_rate(event, frequency, name_suffix=""):
    """`event` sampled at `frequency` by a term of its own ("cpu-clock:u" ->
    "cpu-clock/freq=99,name=cpu-clock:u/u"), so that perf's -c 1 beside it holds for the switch
    tracepoint alone: under a global -F perf samples the tracepoint at that rate too, keeping a
    fraction of the switches. None for an event that cannot take the term (a tracepoint, a PMU
    event already spelt with terms)."""
    name, colon, modifiers = event.partition(":")
    if (not _EVENT_NAME.match(name) or (colon and not modifiers)
            or any(m not in "ukhGHpPSDIWeb" for m in modifiers)):
        return None
    return "%s/freq=%d,name=%s%s/%s" % (name, frequency, event, name_suffix, modifiers)


def rung_name(event, hz):
    """The name an event sampled at `hz` takes on a ladder of rates ("cpu-clock.250hz"); the
    collector reads it as the event itself."""
    return "%s.%dhz" % (event, hz)


def ladder_possible(s):
    """Whether perf record may hold a ladder of rates for `s`: every event takes a rate term of
    its own, no off-CPU switches (their own rates and -c 1)."""
    # (perf reads a control command of at most 63 bytes, "disable NAME": longer names would be
    # cut and not found; a change's lines go in one write under PIPE_BUF)
    return bool(s.events) and len(s.events) <= 16 and not getattr(s, "off_cpu", False) and \
        all(at_own_rate(e, 99) is not None and len("disable " + rung_name(e, 999999)) <= 62
            for e in s.events)


def rung_commands(s, from_hz, to_hz):
    """What perf record's control descriptor is told to sample at `to_hz` instead of `from_hz`
    (0: from nothing, at the start)."""
    out = ""
    for e in s.events:
        if from_hz:
            out += "disable %s\n" % rung_name(e, from_hz)
        out += "enable %s\n" % rung_name(e, to_hz)
    return out


def perf_enables_by_name(version):
    """Whether perf's control descriptor takes commands by event name (perf of about Linux 5.12
    on; asked of 5.13 and later): an older one reads "enable NAME" as "enable", every event."""
    m = re.search(r"(\d+)\.(\d+)", version or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (5, 13)


def off_cpu_events_problem(events):
    """Why off-CPU cannot record beside `events` (one cannot take a rate of its own), or ""."""
    for e in events:
        if at_own_rate(e, 99) is None:
            return ("off-CPU records every switch beside the sampled events, each at a rate of "
                    "its own: '%s' cannot take one (give a named event such as cpu-clock)" % e)
    return ""


def read_build_id(path):
    """The GNU build-id (lowercase hex) from an ELF file's PT_NOTE segments, or None."""
    try:
        f = open(path, "rb")
    except (OSError, IOError):
        return None
    with f:
        def read_at(offset, n):
            try:
                f.seek(offset)
                data = f.read(n)
            except (OSError, IOError, OverflowError, ValueError):
                return b""
            return data if len(data) == n else b""

        ident = read_at(0, 64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) \
                or ident[5] not in (1, 2):
            return None
        wide, order = ident[4] == 2, ">" if ident[5] == 2 else "<"
        phoff = struct.unpack_from(order + ("Q" if wide else "I"), ident, 32 if wide else 28)[0]
        phentsize, phnum = struct.unpack_from(order + "HH", ident, 54 if wide else 42)
        if phentsize < (56 if wide else 32) or phnum == 0 or phnum > 512:
            return None
        table = read_at(phoff, phentsize * phnum)
        for h in range(0, len(table), phentsize):
            kind, offset, size = struct.unpack_from(order + ("I4xQ16xQ" if wide else "II8xI"),
                                                    table, h)
            if kind != 4 or size == 0 or size > 64 * 1024:  # PT_NOTE
                continue
            notes, at = read_at(offset, size), 0
            while len(notes) - at >= 12:
                namesz, descsz, kind = struct.unpack_from(order + "III", notes, at)
                desc_at = at + 12 + ((namesz + 3) & ~3)
                if desc_at + descsz > len(notes):
                    break
                if kind == 3 and namesz == 4 and notes[at + 12:at + 16] == b"GNU\0" \
                        and 0 < descsz <= 64:  # NT_GNU_BUILD_ID
                    return binascii.hexlify(notes[desc_at:desc_at + descsz]).decode("ascii")
                at = desc_at + ((descsz + 3) & ~3)
    return None


class MetricsSampler(object):
    """Health metrics from /proc and /sys; keeps the previous counters so CPU percentages
    cover the interval between two samples."""

    def __init__(self):
        self.last_stat = None
        self.last_process = None  # (pid, ticks, ts)
        self.last_binaries = (None, None)
        self.last_processes = {}
        self.sent_binaries = {}  # by pid, for busiest_binaries
        self.build_ids = {}

    def system(self, ts):
        stat = parse_stat(read_text("/proc/stat") or "")
        cores = stat["cores"]
        before = self.last_stat
        if before is None or len(before["cores"]) != len(cores):
            before = {"all": (0, 0), "cores": [(0, 0)] * len(cores)}
        self.last_stat = stat
        cpu = {"overall_pct": busy_pct(before["all"], stat["all"]),
               "per_core": [busy_pct(b, a) for b, a in zip(before["cores"], cores)]}
        freq = []
        for i in range(len(cores)):
            khz = read_text("/sys/devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq" % i)
            if khz is None:
                break
            freq.append(u64(khz) / 1000.0)
        if freq and len(freq) == len(cores):
            cpu["freq_mhz"] = freq
        cpu["num_cores"] = len(cores)
        load = (read_text("/proc/loadavg") or "").split() + ["0"] * 3
        m = {"type": "system", "ts": ts, "cpu": cpu,
             "mem": parse_meminfo(read_text("/proc/meminfo") or ""),
             "load": {"avg_1m": to_float(load[0]), "avg_5m": to_float(load[1]),
                      "avg_15m": to_float(load[2])}}
        try:
            zones = [z for z in os.listdir("/sys/class/thermal") if z.startswith("thermal_zone")]
        except OSError:
            zones = []
        temps = [read_text("/sys/class/thermal/%s/temp" % zone) for zone in zones]
        temps = [u64(milli) / 1000.0 for milli in temps if milli is not None]
        if temps:
            m["temp_c"] = max(temps)  # the hottest thermal zone
        m.update({"uptime_sec": parse_uptime(read_text("/proc/uptime")),
                  "context_switches": stat["ctxt"], "interrupts": stat["intr"],
                  "procs_running": stat["running"], "procs_blocked": stat["blocked"]})
        return m

    def process(self, pid, ts):
        base = "/proc/%d/" % pid
        stat = parse_pid_stat(read_text(base + "stat"))
        if stat is None:
            return None
        status = parse_pid_status(read_text(base + "status"))
        ticks, hz, last = stat["utime"] + stat["stime"], float(CLK_TCK), self.last_process
        if last and last[0] == pid and ts > last[2]:
            cpu = 100.0 * (ticks - min(ticks, last[1])) / hz / (ts - last[2])
        else:  # first sample: the average since the process started
            alive = parse_uptime(read_text("/proc/uptime")) - stat["start_time"] / hz
            cpu = 100.0 * ticks / hz / alive if alive > 0 else 0.0
        self.last_process = (pid, ticks, ts)
        try:
            fds = len(os.listdir(base + "fd"))
        except OSError:
            fds = 0
        return {"type": "process", "ts": ts, "pid": pid, "comm": stat["comm"],
                "state": stat["state"], "cpu_pct": cpu,
                "rss_kb": status["VmRSS"] or stat["rss_pages"] * os.sysconf("SC_PAGESIZE") // 1024,
                "vsize_kb": stat["vsize"] // 1024, "threads": stat["threads"], "fds": fds,
                "voluntary_csw": status["voluntary_ctxt_switches"],
                "involuntary_csw": status["nonvoluntary_ctxt_switches"],
                "minor_faults": stat["minor_faults"], "major_faults": stat["major_faults"],
                "oom_score": u64(read_text(base + "oom_score"))}

    def network(self, ts):
        interfaces = {}
        for line in (read_text("/proc/net/dev") or "").splitlines():
            name, sep, rest = line.partition(":")
            name = name.strip()
            if not sep or not name or name == "lo":
                continue  # the two header lines have no ':'
            v = [u64(x) for x in rest.split()] + [0] * 16
            interfaces[name] = {"rx_bytes": v[0], "rx_packets": v[1], "rx_errors": v[2],
                                "rx_drops": v[3], "tx_bytes": v[8], "tx_packets": v[9],
                                "tx_errors": v[10]}
        return {"type": "network", "ts": ts, "interfaces": interfaces}

    def disk(self, ts):
        devices = {}
        for line in (read_text("/proc/diskstats") or "").splitlines():
            f = line.split()
            if len(f) < 3 or f[2].startswith(("loop", "ram", "zram")):
                continue
            v = [u64(x) for x in f[3:11]] + [0] * 8
            devices[f[2]] = {"reads": v[0], "read_bytes": v[2] * 512, "writes": v[4],
                             "write_bytes": v[6] * 512, "read_ms": v[3], "write_ms": v[7]}
        return {"type": "disk", "ts": ts, "devices": devices}

    def threads(self, pid, ts):
        task_dir = "/proc/%d/task" % pid
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return None
        stats = [parse_pid_stat(read_text("%s/%s/stat" % (task_dir, tid))) for tid in tids]
        threads = sorted(({"tid": s["pid"], "comm": s["comm"], "state": s["state"],
                           "ticks": s["utime"] + s["stime"]} for s in stats if s),
                         key=lambda t: t["tid"])  # a thread without stat has exited
        return {"type": "threads", "ts": ts, "pid": pid, "clk_tck": CLK_TCK, "threads": threads}

    def binaries(self, pid, ts):
        """The target's executable mappings with build-ids; None when unchanged or gone."""
        maps = read_text("/proc/%d/maps" % pid)
        if maps is None:
            return None
        paths = parse_maps_executables(maps)
        if self.last_binaries == (pid, paths):
            return None
        self.last_binaries = (pid, paths)
        return self._binaries_record(pid, ts, paths)

    def busiest_binaries(self, ts, n=8):
        """Profiling the whole system: the executable mappings of the n processes that used the
        most CPU since the last call, each process's when its set of files is new to it."""
        now = snapshot_processes()
        busy = sorted(((ticks - self.last_processes[pid][1], pid) for pid, (comm, ticks)
                       in now.items() if pid in self.last_processes and
                       ticks > self.last_processes[pid][1]), reverse=True)
        self.last_processes = now
        if len(self.sent_binaries) > 4096:
            self.sent_binaries.clear()  # (pids come and go: bound what is remembered)
        out = []
        looked = 0  # processes that map files (kernel threads map none: not counted)
        for _, pid in busy:
            if looked == n:
                break
            maps = read_text("/proc/%d/maps" % pid)
            if maps is None:
                continue
            paths = parse_maps_executables(maps)
            if not paths:
                continue
            looked += 1
            if self.sent_binaries.get(pid) == paths:
                continue
            out.append(self._binaries_record(pid, ts, paths))
            self.sent_binaries[pid] = paths
        return out

    def _binaries_record(self, pid, ts, paths):
        if len(self.build_ids) > 4096:
            self.build_ids.clear()  # a process that maps ever new files: bound the cache
        for path in paths:
            if path not in self.build_ids:
                # Through the target's root, so a process in a container names its own files.
                self.build_ids[path] = read_build_id("/proc/%d/root%s" % (pid, path)) \
                    or read_build_id(path) or ""
        return {"type": "binaries", "ts": ts, "pid": pid,
                "binaries": [{"path": p, "build_id": self.build_ids[p]} for p in paths]}


def snapshot_processes():
    """{pid: (comm, utime + stime)} for every process now."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    stats = [parse_pid_stat(read_text("/proc/%s/stat" % n)) for n in names if n.isdigit()]
    return dict((s["pid"], (s["comm"], s["utime"] + s["stime"])) for s in stats if s)


def top_processes(before, after, seconds, limit=200):
    rows = []
    for pid in sorted(after):
        comm, ticks = after[pid]
        base = before[pid][1] if pid in before else ticks
        cpu = 100.0 * (ticks - min(ticks, base)) / float(CLK_TCK) / seconds if seconds > 0 else 0.0
        rows.append({"pid": pid, "comm": comm, "cmdline": "", "cpu": cpu})
    rows = sorted(rows, key=lambda r: -r["cpu"])[:limit]  # stable: ties stay in pid order
    for r in rows:
        r["cmdline"] = read_cmdline(r["pid"])
    return rows


# ================================================================================ perf: children

_children = set()  # running perf (and zstd) children, killed if the agent exits
_children_lock = threading.Lock()
_parent_pid = os.getpid()
_SIGKILL = int(signal.SIGKILL)
try:
    _libc = ctypes.CDLL(None, use_errno=True) if ctypes else None
except OSError:
    _libc = None


def _child_setup():
    # Between fork and exec: die with the agent even if it is killed outright.
    if _libc is not None:
        _libc.prctl(1, _SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != _parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)


_exits = collections.deque(maxlen=256)  # (pid, own CPU ns at its end), for CostMeter


def note_child_exit(pid, proc_root="/proc"):
    """A child's own CPU at its end (its descendants' not counted), read while it is a
    zombie: once reaped, /proc has nothing left of it."""
    st = parse_pid_stat(read_text("%s/%d/stat" % (proc_root, pid)))
    _exits.append((pid, int((st["utime"] + st["stime"]) * 1e9 / CLK_TCK) if st else 0))


class Child(subprocess.Popen):
    """A perf (or zstd) child whose CPU up to its end the overhead meter counts: poll and wait
    (communicate's too) note it while it is a zombie, before reaping it."""

    def _exited(self, block):
        if self.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid,
                             os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG))
        except (OSError, AttributeError):
            return False
        if info is None or info.si_pid != self.pid:
            return False
        if not getattr(self, "_noted", False):
            self._noted = True
            note_child_exit(self.pid)
        return True

    def poll(self):
        self._exited(False)
        return super(Child, self).poll()

    def wait(self, timeout=None):
        if timeout is None:
            self._exited(True)
        else:
            until, pause = monotonic() + timeout, 0.0005
            while not self._exited(False) and monotonic() < until:
                time.sleep(min(pause, max(0.0, until - monotonic())))
                pause = min(pause * 2, 0.05)
        return super(Child, self).wait(timeout)


def spawn(argv, stdin=None, stdout=None, stderr=None, pass_fds=()):
    """Starts a child (stdin and unset outputs default to /dev/null). Raises OSError.
    PR_SET_PDEATHSIG follows the thread that forks: call this from a thread that outlives
    the child."""
    p = Child(argv, stdin=subprocess.DEVNULL if stdin is None else stdin,
                         stdout=subprocess.DEVNULL if stdout is None else stdout,
                         stderr=subprocess.DEVNULL if stderr is None else stderr,
                         preexec_fn=_child_setup, close_fds=True, pass_fds=pass_fds)
    with _children_lock:
        _children.add(p)
    return p


def forget_child(p):
    with _children_lock:
        _children.discard(p)


def signal_child(p, sig):
    if p is not None and p.returncode is None:
        try:
            p.send_signal(sig)
        except OSError:
            pass


def kill_child(p):
    if p is None:
        return
    if p.poll() is None:
        signal_child(p, signal.SIGKILL)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    forget_child(p)


def stop_child(p, grace):
    """SIGINT so perf flushes, up to `grace` seconds, then SIGKILL."""
    signal_child(p, signal.SIGINT)
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        kill_child(p)
    forget_child(p)


def kill_all_children():
    with _children_lock:
        left = list(_children)
    for p in left:
        kill_child(p)


def pump(streams, on_data, tick=None, deadline=None):
    """Reads the pipes in `streams` ({fd: name}) until each reaches EOF, handing every block
    to on_data(name, data) and an empty one at EOF; tick() runs at least every 0.1 s.
    False if `deadline` passed first."""
    sel = selectors.DefaultSelector()
    try:
        for fd, name in streams.items():
            sel.register(fd, selectors.EVENT_READ, name)
        while sel.get_map():
            timeout = 0.1
            if deadline is not None:
                timeout = min(timeout, deadline - monotonic())
                if timeout <= 0:
                    return False
            for key, _ in sel.select(timeout):
                try:
                    data = os.read(key.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fd)
                on_data(key.data, data)
            if tick is not None:
                tick()
        return True
    finally:
        sel.close()


def bounded_buffers(limits):
    """A {name: bytearray} and an on_data for pump() that keeps at most limits[name] bytes."""
    bufs = dict((name, bytearray()) for name in limits)

    def on_data(name, data):
        bufs[name] += data[:max(0, limits[name] - len(bufs[name]))]
    return bufs, on_data


def run_command(argv, timeout):
    """Runs to completion (or `timeout` s, then stop) -> dict(code, out, err, error)."""
    result = {"code": -1, "out": "", "err": "", "error": "", "timed_out": False}
    try:
        p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        result["error"] = "%s: %s" % (argv[0], os_message(e))
        return result
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        result["timed_out"] = True
        stop_child(p, 0.5)
        out, err = p.communicate()
    forget_child(p)
    code = p.returncode  # -N for a child killed by signal N: 128+N, like the C++ agent
    result.update(code=128 - code if code < 0 else code, out=out.decode("utf-8", "replace"),
                  err=err.decode("utf-8", "replace"))
    return result


def start_pipeline(perf, record, script, pass_fds=()):
    """`perf record -o -` piped into `perf script -i -`, their other outputs piped: (record,
    script). `pass_fds`: perf record's too (its control descriptor). Raises OSError."""
    rec = spawn([perf] + record, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=pass_fds)
    try:
        scr = spawn([perf] + script, stdin=rec.stdout, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    except OSError:
        rec.stderr.close()
        kill_child(rec)
        raise
    finally:
        rec.stdout.close()
    return rec, scr


def parallel(*calls):
    """Runs the callables at once, each in its own thread; their results in order."""
    results = [None] * len(calls)

    def run(i):
        results[i] = calls[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ================================================================================ perf: commands

CANDIDATE_EVENTS = ["cycles", "instructions", "cache-misses", "cache-references",
                    "branch-misses", "branch-instructions", "page-faults", "context-switches",
                    "cpu-migrations"]
SOFTWARE_CLOCKS = ["cpu-clock", "task-clock"]
SAMPLING_PREFERENCE = ["cycles", "cpu-clock"]
SCRIPT_FIELDS = "comm,tid,pid,time,period,event,ip,sym,symoff,dso"
PERF_STAT_MARKER = b"\n### PERF_STAT ###\n"
# A metrics record inside perf script text, as a comment perf's readers skip (--output keeps
# the binaries' build-ids the live link would send beside the samples).
METRICS_NOTE = b"# perfwire-metrics "


class Settings(object):
    """What one collection records: perf record's settings plus chunking."""

    def __init__(self, frequency=99, pid=None, duration=8):
        self.events, self.stat_events = [], []
        self.frequency, self.pid, self.duration = frequency, pid, duration  # pid None: system
        self.callgraph = "fp"  # fp, dwarf, lbr; empty for none
        self.script_fields = True
        self.chunk_max_text = 16 << 20
        self.rounds = False
        # continuous: this many periods of `duration`, then the run ends (0: until stopped);
        # perf record is bounded by a sleep of them all, so its drain makes the last chunk
        self.periods = 0
        # What perf script printed is sent this often, whatever `duration` (a period: perf
        # stat's report, a round); 0: only at the end of a period.
        self.flush_interval = FLUSH_INTERVAL
        # Streaming perf record may take --no-buffering (up to PROMPT_MAX_HZ): live views
        # within half a second, at a cost (perf woken per sample; a run held to an overhead
        # budget gives it up). False once perf refused it.
        self.prompt = True
        # Where the threads wait too: every scheduler switch of the target (its stack where it
        # left the CPU) and perf's switch records (when it came back): the off-cpu event.
        self.off_cpu = False
        self.off_cpu_min_us = 0  # shorter waits are not sent (WaitFolder)


FLUSH_INTERVAL = 0.333
PROMPT_MAX_HZ = 400
FLUSH_BACKLOG = 64 << 10  # data still queued on the link past which a flush waits


def mmap_pages_for(frequency, dwarf=False):
    # About a quarter of a second of samples (perf wakes at half full, which at a modest rate
    # on several CPUs still takes seconds: streaming asks for --no-buffering too).
    half_buffer = frequency * (8704 if dwarf else 256) // 4
    pages = 8
    while pages < 1024 and pages * 4096 // 2 < half_buffer:
        pages *= 2
    return pages


def target_args(pid):
    return ["-p", str(pid)] if pid is not None else ["-a"]


def record_args(s, output, command=None, prompt=False, control_fd=None):
    """`prompt`: --no-buffering, perf hands each sample on as it is taken. `control_fd`: the
    descriptor perf record reads its commands from, for a ladder of rates (s.ladder: each
    event at every rate by a name of its own, none sampling until told; rung_commands)."""
    off_cpu = getattr(s, "off_cpu", False)
    ladder = getattr(s, "ladder", None) if control_fd is not None and ladder_possible(s) else None
    # Off-CPU: each event at its rate, every switch kept (-c 1 holds for the tracepoint alone).
    own = ([at_own_rate(e, s.frequency) for e in s.events]
           if off_cpu and not off_cpu_events_problem(s.events) else [])
    if ladder:
        args = ["record", "-e", ",".join(at_own_rate(e, hz, rung_name("", hz))
                                         for hz in ladder for e in s.events),
                "-D", "-1", "--control", "fd:%d" % control_fd]
    elif own:
        args = ["record", "-e", ",".join(own), "-c", "1"]
    else:
        args = ["record", "-e", ",".join(s.events), "-F", str(s.frequency)]
    if s.callgraph:
        args.append("--call-graph=" + s.callgraph)
    pages = mmap_pages_for(max(ladder) if ladder else s.frequency, s.callgraph == "dwarf")
    # (Switches come at any rate: with them, at least perf's default of 128 pages.)
    args += ["-m", str(max(pages, 128) if off_cpu else pages)]
    if prompt and not off_cpu:  # (woken per sample, perf drops switches)
        args.append("--no-buffering")
    if off_cpu:
        args += ["-e", "sched:sched_switch", "--switch-events"]
    args += target_args(s.pid) + ["-o", output]
    return args + (["--"] + command if command else [])


def script_args(source, with_fields, with_cpu, off_cpu=False):
    """`off_cpu`: the switch records and the tracepoint's arguments (the kind of wait) too."""
    args = ["script", "-i", source, "--show-lost-events"]
    if off_cpu:
        args.append("--show-switch-events")
    if with_fields:
        fields = SCRIPT_FIELDS
        if with_cpu:
            fields = "comm,tid,pid,cpu," + fields[len("comm,tid,pid,"):]
        if off_cpu:  # (perf says 'trace' does not apply to the sampling event, and goes on)
            fields = fields.replace(",event,", ",event,trace,", 1)
        args += ["-F", fields]
    return args


def stat_args(events, pid, command=None):
    args = ["stat", "-e", ",".join(events)] + target_args(pid)
    return args + (["--"] + command if command else [])


def counted_events(text, asked):
    """Events a perf stat report counted (not "<not supported>", not "<not counted>")."""
    out = []
    for line in text.split("\n"):
        line = line.strip(" \t\r")
        if not line or line.startswith("<not"):
            continue
        body = line.split("#", 1)[0].strip(" \t\r")
        parts = re.split(r"[ \t]", body)
        if len(parts) >= 2 and body[0].isdigit() and parts[-1] in asked \
                and parts[-1] not in out:
            out.append(parts[-1])
    return out


def has_call_chains(text):
    frames = 0
    for line in text.split("\n"):
        frames = frames + 1 if line.startswith("\t") else 0
        if frames >= 2:
            return True
    return False


def perf_version_line(text):
    line = text.split("\n", 1)[0].strip(" \t\r")
    # A hello's strings are bounded (256 bytes each): a vendor's long one is cut.
    return line[:200] if line.startswith("perf version") else ""


def sample_count(text):
    """Samples in perf script text: its lines that are not frames."""
    return sum(1 for line in text.split("\n") if line.strip(" \t\r") and line[0] != "\t")


def perf_complaint(text):
    """The first line of perf's stderr that says something (not its "[ perf record: …" lines),
    with the next when it is a bare "Error:" (perf says why on the line after)."""
    said = ""
    for line in text.split("\n"):
        line = line.strip(" \t\r")
        # (what perf says of its control commands is not a complaint: "Events disabled",
        # "Event cpu-clock.511hz enabled")
        control = line in ("Events disabled", "Events enabled") or (
            line.startswith("Event ") and line.endswith((" enabled", " disabled")))
        if line and not line.startswith("[ perf record:") and not control:
            said = line if not said else said + " " + line
            if said != "Error:":
                break
    return said[:200]


class Capabilities(object):
    """What the perf on this device can really do, found by what perf did (exit status, bytes
    of perf.data written, samples and stacks printed), never by what its messages look like."""

    def __init__(self):
        self.record_events, self.stat_only_events, self.warnings = [], [], []
        self.callgraph, self.script_fields, self.pipe_mode = "", True, True
        self.callgraph_modes = []  # those a start may choose (the default too)
        self.perf_event_paranoid, self.perf_version, self.probe_seconds = 2, "", 0.0
        # The target ran during the probe, so its findings hold for any other: a start on
        # another process need not probe again.
        self.judged = False
        self.cannot = []  # phrases that follow "this perf cannot"
        self.rejected_events, self.unusable_callgraph = {}, {}  # name -> why
        self.pipe_problem = ""
        self.tried = []  # every perf command run, as step dicts

    def to_json(self):
        return {"record_events": self.record_events, "stat_only_events": self.stat_only_events,
                "callgraph_method": self.callgraph or None,
                "callgraph_modes": self.callgraph_modes, "script_fields": self.script_fields,
                "pipe_mode": self.pipe_mode, "perf_event_paranoid": self.perf_event_paranoid,
                "perf_version": self.perf_version, "warnings": self.warnings,
                "cannot": self.cannot, "rejected_events": self.rejected_events,
                "tried": [step_json(t) for t in self.tried], "probe_seconds": self.probe_seconds}

    def why_not_event(self, event):
        why = "unknown event: " + event
        if event in self.rejected_events:
            why = "%s cannot be used with this perf (%s)" % (event, self.rejected_events[event])
        if not self.record_events:  # and why, as the probe found it
            return why + "; this perf samples no event" + (
                " (cannot %s)" % "; cannot ".join(self.cannot) if self.cannot else "")
        return why + " (this device samples %s)" % ", ".join(self.record_events)

    def why_not_callgraph(self, mode):
        why = "callgraph must be one this device records: " + ", ".join(
            ["none"] + self.callgraph_modes)
        if mode in self.unusable_callgraph:
            why += " (%s: %s)" % (mode, self.unusable_callgraph[mode])
        return why


PROBE_RUN_TIMEOUT = 8  # s, each perf run of the probe; perf on a small board starts slowly
MAX_RECORD_CANDIDATES = 3


def sleep_program():
    """The `sleep` that bounds a probe or a round: from PATH, else where systems keep it (an
    agent started with a narrow PATH still probes), else the bare name."""
    for name in ("sleep", "/bin/sleep", "/usr/bin/sleep", "/system/bin/sleep"):
        found = find_program(name)
        if found:
            return found
    return "sleep"


def probe_sleep():
    return [sleep_program(), "0.25"]
CALLGRAPH_ORDER = ("fp", "dwarf", "lbr")


def new_step(command):
    return {"command": command, "status": -1, "timed_out": False, "bytes": 0, "samples": 0,
            "stacks": False, "complaint": ""}


def step_json(step):
    out = dict((k, v) for k, v in step.items() if k != "timed_out")
    if step["timed_out"]:
        out["timed_out"] = True
    return out


def shell_words(args):
    return " ".join(["perf"] + args)


def exit_status(code):
    return -1 if code is None else (128 - code if code < 0 else code)


def is_hardware(event):
    return event in ("cycles", "instructions") or event.startswith("cache-") or \
        event.startswith("branch-")


def mentions_bad_field(err):
    return "Invalid field" in err or "unknown field" in err


def new_run(command):
    return {"step": new_step(command), "script_status": -1, "script_err": ""}


def worked(run):
    return run["step"]["status"] == 0 and run["step"]["bytes"] > 0 and run["script_status"] == 0


def streamed(run):
    """perf record wrote perf.data into the pipe, even if perf script did not finish naming the
    samples in time (a busy device): the pipe works; a timeout alone proves nothing."""
    return worked(run) or (run["step"]["timed_out"] and run["step"]["bytes"] > 0)


def fill_from_script(step, out):
    step["samples"], step["stacks"] = sample_count(out), has_call_chains(out)


def record_pipe_run(perf, s, fields):
    """perf record of `s` for a quarter second into a pipe, relayed by the agent (which counts
    the bytes perf record produced, whatever its messages say) into perf script."""
    args = record_args(s, "-", probe_sleep())
    run = new_run(shell_words(args) + " | perf script")
    step = run["step"]
    try:
        rec = spawn([perf] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError:
        step["complaint"] = "cannot run " + perf
        return run
    try:
        scr = spawn([perf] + script_args("-", fields, False), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError:
        for f in (rec.stdout, rec.stderr):
            f.close()
        kill_child(rec)
        step["complaint"] = "cannot run " + perf
        return run
    relayed = [0]

    def relay():
        writing = True
        while True:
            try:
                data = os.read(rec.stdout.fileno(), 65536)
            except OSError:
                data = b""
            if not data:
                break
            relayed[0] += len(data)
            if writing:
                try:
                    scr.stdin.write(data)
                    scr.stdin.flush()
                except (OSError, ValueError):
                    writing = False  # perf script gave up: perf record is drained regardless
        try:
            scr.stdin.close()
        except (OSError, ValueError):
            pass
    relay_thread = start_thread(relay, "probe relay")
    bufs, on_data = bounded_buffers({"out": 4 << 20, "rerr": 64 << 10, "serr": 64 << 10})
    finished = pump({scr.stdout.fileno(): "out", rec.stderr.fileno(): "rerr",
                     scr.stderr.fileno(): "serr"}, on_data,
                    deadline=monotonic() + PROBE_RUN_TIMEOUT)
    stop_child(rec, 0.5)
    stop_child(scr, 0.5)
    relay_thread.join(2.0)
    for f in (rec.stdout, rec.stderr, scr.stdout, scr.stderr):
        f.close()
    step["status"], run["script_status"] = exit_status(rec.returncode), \
        exit_status(scr.returncode)
    step["bytes"] = relayed[0]
    if finished:
        fill_from_script(step, bufs["out"].decode("utf-8", "replace"))
        step["complaint"] = perf_complaint(bufs["rerr"].decode("utf-8", "replace"))
        run["script_err"] = bufs["serr"].decode("utf-8", "replace")
    else:
        step["timed_out"] = True
    if not step["complaint"] and run["script_status"] != 0:
        step["complaint"] = "perf script: " + perf_complaint(run["script_err"])
    return run


def record_file_run(perf, s, fields, path):
    """perf record of `s` for a quarter second into a file, then perf script of it."""
    args = record_args(s, path, probe_sleep())
    run = new_run(shell_words(args) + " && perf script -i " + path)
    step = run["step"]
    rec = run_command([perf] + args, PROBE_RUN_TIMEOUT)
    step["status"], step["timed_out"] = rec["code"], rec["timed_out"]
    step["complaint"] = rec["error"] or perf_complaint(rec["err"])
    try:
        step["bytes"] = os.path.getsize(path)
    except OSError:
        step["bytes"] = 0
    if step["status"] == 0 and step["bytes"] > 0:
        scr = run_command([perf] + script_args(path, fields, False), PROBE_RUN_TIMEOUT)
        run["script_status"], run["script_err"] = scr["code"], scr["err"]
        fill_from_script(step, scr["out"])
        if run["script_status"] != 0 and not step["complaint"]:
            step["complaint"] = "perf script: " + perf_complaint(run["script_err"])
    try:
        os.remove(path)
    except OSError:
        pass
    return run


def why_failed(step):
    if step["timed_out"]:
        return "no answer within %d s" % PROBE_RUN_TIMEOUT
    if step["status"] == 0 and step["bytes"] == 0:
        return "it exited 0 but wrote no data"
    why = "could not run" if step["status"] < 0 else "exit status %d" % step["status"]
    return why + (": " + step["complaint"] if step["complaint"] else "")


class Prober(object):
    """What the probe knows so far; runs are kept by what they asked, so none is made twice."""

    def __init__(self, perf, pid, caps, folder):
        self.perf, self.pid, self.caps, self.folder = perf, pid, caps, folder
        self.runs, self.files, self.lock = {}, 0, threading.Lock()

    @staticmethod
    def key(event, callgraph, pipe):
        return "%s|%s|%s" % (event, callgraph or "-", "pipe" if pipe else "file")

    def ensure(self, asked, pipe):
        """Runs those of `asked` [(event, call graph)] not run yet, all at once."""
        order, calls = [], []
        for event, callgraph in asked:
            k = self.key(event, callgraph, pipe)
            if k in self.runs or k in order:
                continue
            order.append(k)
            s = Settings(999, self.pid)
            s.events, s.callgraph = [event], callgraph
            with self.lock:
                path = "%s/probe%d.data" % (self.folder, self.files)
                self.files += 1
            fields = self.caps.script_fields
            calls.append((lambda s=s, path=path: record_pipe_run(self.perf, s, fields)) if pipe
                         else (lambda s=s, path=path: record_file_run(self.perf, s, fields, path)))
        results = parallel(*calls)
        with self.lock:
            for k, r in zip(order, results):
                self.runs[k] = r
                self.caps.tried.append(r["step"])

    def get(self, event, callgraph, pipe):
        return self.runs.get(self.key(event, callgraph, pipe)) or new_run("")

    def count(self, events, counted, depth):
        """perf stat over `events`; a perf that refuses the whole list for one name is asked
        again with each half, down to single events."""
        args = stat_args(events, self.pid, probe_sleep())
        r = run_command([self.perf] + args, PROBE_RUN_TIMEOUT)
        step = new_step(shell_words(args))
        step["status"], step["timed_out"] = r["code"], r["timed_out"]
        if r["code"] != 0:  # (a counting perf's stderr is its table)
            step["complaint"] = r["error"] or perf_complaint(r["err"])
        with self.lock:
            self.caps.tried.append(step)
        if r["code"] == 0:
            counted.extend(counted_events(r["err"], events))
            return
        if len(events) == 1 or depth >= 6:
            for e in events:
                self.caps.rejected_events[e] = "perf stat: " + (
                    step["complaint"] or "exit status %d" % step["status"])
            return
        half = len(events) // 2
        first, second = [], []
        parallel(lambda: self.count(events[:half], first, depth + 1),
                 lambda: self.count(events[half:], second, depth + 1))
        counted.extend(first + second)


def sweep_probe_dirs(tmp, older_than):
    """Removes the scratch folders of probes (perfwire-probe-*) in `tmp` that an agent killed
    mid-probe left: only this user's own, made as mkdtemp makes them (0700: nobody else can have
    put anything in one, so its files go unlooked at; nothing deeper is entered), untouched for
    `older_than` seconds."""
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    now = time.time()
    for name in names:
        if not name.startswith("perfwire-probe-"):
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                    or st.st_mode & 0o77 or now - st.st_mtime < older_than):
                continue
            for inner in os.listdir(path):
                try:
                    os.unlink(os.path.join(path, inner))
                except OSError:
                    pass
            os.rmdir(path)
        except OSError:
            pass


def probe(perf, pid):
    """What this perf can do for `pid` (or the whole system): about a second with a
    well-behaved perf; an odd one takes a few more rounds of short runs, each bounded."""
    started = monotonic()
    caps = Capabilities()
    caps.perf_event_paranoid = read_perf_event_paranoid()
    if caps.perf_event_paranoid > 1 and os.geteuid() != 0:
        caps.warnings.append("perf_event_paranoid is %d: profiling other users' processes and "
                             "the kernel needs root or a value of 1 or less"
                             % caps.perf_event_paranoid)
    sweep_probe_dirs("/tmp", 600)  # an agent killed while it probed left its scratch folder
    try:
        folder = tempfile.mkdtemp(prefix="perfwire-probe-", dir="/tmp")
    except OSError:
        folder = "/tmp"
    p = Prober(perf, pid, caps, folder)
    clock = SOFTWARE_CLOCKS[0]

    # First round, at once: perf's version; perf stat over every candidate (which events count
    # at all); and, betting on the common case, the software clock recorded through the pipe
    # with frame pointers and with dwarf.
    asked = CANDIDATE_EVENTS + SOFTWARE_CLOCKS
    counted = []
    clock_runs = [(clock, "fp"), (clock, "dwarf")]
    _, _, version = parallel(lambda: p.count(asked, counted, 0),
                             lambda: p.ensure(clock_runs, True),
                             lambda: run_command([perf, "--version"], PROBE_RUN_TIMEOUT))
    caps.perf_version = perf_version_line(version["out"])
    if mentions_bad_field(p.get(clock, "fp", True)["script_err"]):
        caps.script_fields = False  # an old perf script without -F: again in its own format
        p.runs.clear()
        p.ensure(clock_runs, True)
    for e in asked:  # <not supported> on this machine (no PMU, a VM)
        if e not in counted and e not in caps.rejected_events:
            caps.rejected_events[e] = "not supported here"

    # Sampling events in order of preference, each proved by perf record.
    candidates = [e for e in SAMPLING_PREFERENCE if e in counted]
    candidates += [e for e in counted if e not in candidates]
    if not counted:  # perf stat told nothing: let perf record decide
        candidates = [e for e in ("cycles", clock, SOFTWARE_CLOCKS[-1])
                      if caps.rejected_events.get(e, "not supported here") == "not supported here"]
    candidates = candidates[:MAX_RECORD_CANDIDATES]

    event, pipe, flat = "", True, False  # flat: records, but not with any call graph
    for ev in candidates:
        graphs = [(ev, m) for m in (CALLGRAPH_ORDER if is_hardware(ev) else ("fp", "dwarf"))]
        p.ensure(graphs, True)
        if any(streamed(p.get(e, cg, True)) for e, cg in graphs):
            event = ev
            break
        # Nothing through the pipe: the pipe, the call graphs or the event itself?
        parallel(lambda: p.ensure([(ev, "")], True),
                 lambda: p.ensure([(ev, "fp"), (ev, "")], False))
        if worked(p.get(ev, "", True)):
            event, flat = ev, True
        elif worked(p.get(ev, "fp", False)) or worked(p.get(ev, "", False)):
            event, pipe = ev, False
            flat = not worked(p.get(ev, "fp", False))
            if not flat:
                p.ensure([(ev, m) for m in (("dwarf", "lbr") if is_hardware(ev) else ("dwarf",))],
                         False)
        else:
            caps.rejected_events[ev] = "perf record: " + why_failed(p.get(ev, "", False)["step"])
            continue
        if not pipe:
            caps.pipe_problem = why_failed(p.get(ev, "fp", True)["step"])
        break
    if folder != "/tmp":
        shutil.rmtree(folder, ignore_errors=True)

    if not event:
        caps.pipe_mode, caps.callgraph = False, ""
        why = "; ".join("%s: %s" % (e, caps.rejected_events.get(e, "")) for e in candidates)
        caps.cannot.append("sample any event (%s)" % (why or "none counted"))
    else:
        caps.record_events, caps.pipe_mode = [event], pipe
        if not pipe:
            caps.cannot.append("write perf.data to a pipe (perf record -o -: %s); it records in "
                               "rounds of files" % caps.pipe_problem)
        # The call graph: the first mode that gave stacks.
        for mode in CALLGRAPH_ORDER:
            k = Prober.key(event, mode, pipe)
            if k not in p.runs:
                continue
            r = p.runs[k]
            if worked(r) and r["step"]["stacks"]:
                caps.callgraph_modes.append(mode)
                caps.callgraph = caps.callgraph or mode
            elif r["step"]["timed_out"] and not flat:
                # Slow (dwarf unwinding on a busy device) is not unusable: a start may ask
                # for it, and its own run shows whether stacks come.
                caps.callgraph_modes.append(mode)
                caps.warnings.append("--call-graph=%s not checked (%s); a start may still choose "
                                     "it" % (mode, why_failed(r["step"])))
            elif not worked(r):
                caps.unusable_callgraph[mode] = why_failed(r["step"])
            else:
                caps.unusable_callgraph[mode] = "no stacks in %d samples" % r["step"]["samples"]
        fp = p.get(event, "" if flat else "fp", pipe)
        caps.judged = fp["step"]["samples"] > 0
        if flat:
            caps.cannot.append("record call graphs (--call-graph=fp: %s); samples have no stacks"
                               % caps.unusable_callgraph.get("fp", ""))
        elif not caps.callgraph and worked(fp):
            caps.callgraph = "fp"  # records, but gave no stack to judge by
            caps.callgraph_modes.insert(0, "fp")
            caps.warnings.append("the target ran too little during the probe to check call "
                                 "graphs; assuming frame pointers" if fp["step"]["samples"] == 0
                                 else "no call-graph mode yielded stacks; build the target "
                                 "with -fno-omit-frame-pointer for full stacks")
        elif not caps.callgraph:
            # fp fails but another mode records: take it even without stacks seen.
            for mode in CALLGRAPH_ORDER:
                if Prober.key(event, mode, pipe) in p.runs and worked(p.get(event, mode, pipe)):
                    caps.callgraph = mode
                    caps.callgraph_modes.append(mode)
                    break
            # Nothing finished in time, but perf record streamed: the first mode not checked.
            if not caps.callgraph and caps.callgraph_modes:
                caps.callgraph = caps.callgraph_modes[0]
    for e in sorted(caps.rejected_events):
        if caps.rejected_events[e].startswith("perf stat"):
            caps.cannot.append("count %s (%s)" % (e, caps.rejected_events[e]))
    caps.stat_only_events = [e for e in counted
                             if not caps.record_events or e != caps.record_events[0]]
    caps.probe_seconds = monotonic() - started
    return caps


def probe_settings(s, perf, pid, events, say):
    """Probes perf for `pid`, says its warnings, and sets `s` to record what it found (`events`
    when given, else the probe's sampling event); the capabilities."""
    caps = probe(perf, pid)
    for w in caps.warnings:
        say("probe: " + w)
    for c in caps.cannot:
        say("probe: this perf cannot " + c)
    use_capabilities(s, caps, events)
    return caps


def use_capabilities(s, caps, events):
    """Sets `s` to record what the probe found (`events` when given)."""
    s.events = list(events or caps.record_events)
    s.callgraph, s.script_fields = caps.callgraph, caps.script_fields


def default_state_dir():
    """Where what the probe found is kept for the next start: /var/lib/perfwire-agent for
    root, else $XDG_STATE_HOME (~/.local/state)/perfwire-agent; "" when none is known."""
    if os.geteuid() == 0:
        return "/var/lib/perfwire-agent"
    xdg, home = os.environ.get("XDG_STATE_HOME", ""), os.environ.get("HOME", "")
    if xdg.startswith("/"):
        return xdg + "/perfwire-agent"
    return home + "/.local/state/perfwire-agent" if home.startswith("/") else ""


PROBE_FILE = "python-probe.json"


def probe_fingerprint(perf):
    """What makes a probe's findings hold: the perf executable as it is run (its path, device,
    inode, size and change time), the kernel release, perf_event_paranoid and the user; ""
    when perf is not found."""
    path = find_program(perf)
    if not path:
        return ""
    try:
        st = os.stat(path)
        paranoid = open("/proc/sys/kernel/perf_event_paranoid").read().strip()
    except (OSError, ValueError):
        return ""
    return "%s|%d:%d:%d:%d|%s|%s|%d" % (path, st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns,
                                         os.uname().release, paranoid, os.geteuid())


def capabilities_from_json(o):
    """Capabilities read back from what keep_probe wrote; None when malformed."""
    if not isinstance(o, dict) or not isinstance(o.get("record_events"), list):
        return None
    c = Capabilities()
    strings = lambda k: [x for x in (o.get(k) if isinstance(o.get(k), list) else [])
                         if isinstance(x, str)]
    mapping = lambda k: {a: b for a, b in (o.get(k) if isinstance(o.get(k), dict) else {}).items()
                         if isinstance(b, str)}
    c.record_events, c.stat_only_events = strings("record_events"), strings("stat_only_events")
    c.callgraph = o.get("callgraph_method") or ""
    c.callgraph_modes, c.warnings, c.cannot = strings("callgraph_modes"), strings("warnings"), \
        strings("cannot")
    # What perf is run with comes from the file: only the events and modes a probe of this agent
    # tries (perf takes a file name as an event and compiles it: never a stranger's).
    known = set(CANDIDATE_EVENTS + SOFTWARE_CLOCKS + SAMPLING_PREFERENCE)
    modes = CALLGRAPH_ORDER
    if any(e not in known for e in c.record_events + c.stat_only_events) or \
            not isinstance(c.callgraph, str) or (c.callgraph and c.callgraph not in modes) or \
            any(m not in modes for m in c.callgraph_modes):
        return None
    c.script_fields, c.pipe_mode = o.get("script_fields") is not False, o.get("pipe_mode") is not False
    c.judged = o.get("judged") is True
    if isinstance(o.get("perf_event_paranoid"), int):
        c.perf_event_paranoid = o["perf_event_paranoid"]
    c.perf_version = o.get("perf_version") if isinstance(o.get("perf_version"), str) else ""
    c.rejected_events, c.unusable_callgraph = mapping("rejected_events"), mapping("unusable_callgraph")
    c.pipe_problem = o.get("pipe_problem") if isinstance(o.get("pipe_problem"), str) else ""
    if isinstance(o.get("probe_seconds"), (int, float)):
        c.probe_seconds = float(o["probe_seconds"])
    return c


def recall_kept_probe(state_dir, fingerprint, pid):
    """The findings an earlier start kept in `state_dir` for this perf, kernel and setting, when
    they hold for `pid`; else None."""
    if not state_dir or not fingerprint:
        return None
    try:
        path = os.path.join(state_dir, PROBE_FILE)
        # A regular file of at most 1 MiB, opened without following a link or waiting on a FIFO.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
        with os.fdopen(fd) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > (1 << 20):
                return None
            kept = json.loads(f.read(1 << 20))
    except (OSError, ValueError, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(kept, dict) or kept.get("fingerprint") != fingerprint:
        return None
    caps = capabilities_from_json(kept.get("capabilities"))
    if caps is None or not (caps.judged or (kept.get("whole_system") is True and pid is None)):
        return None
    return caps


def keep_probe(state_dir, fingerprint, caps, pid):
    """Keeps `caps` in `state_dir` when they hold beyond the one process probed, written whole
    or not at all."""
    if not state_dir or not fingerprint or (not caps.judged and pid is not None):
        return False
    o = caps.to_json()
    o.pop("tried", None)
    o["judged"], o["unusable_callgraph"], o["pipe_problem"] = \
        caps.judged, caps.unusable_callgraph, caps.pipe_problem
    path = os.path.join(state_dir, PROBE_FILE)
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        temp = "%s.%d" % (path, os.getpid())  # agents starting together: a file each
        try:
            os.unlink(temp)
        except OSError:
            pass
        # A new file of its own: never through a link or into a file someone planted there.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                     getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"fingerprint": fingerprint, "whole_system": pid is None, "capabilities": o}, f)
        os.replace(temp, path)
        return True
    except OSError:
        return False


class ProbeMemory(object):
    """What the probe found, kept as long as the agent runs and shared by its connections: a
    collector that connects again starts at once instead of waiting for perf to be probed
    again. `reprobe` refreshes it. Kept on the device too (--state-dir): the next start with
    the same perf, kernel and setting need not probe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.caps = self.pid = None
        self.state_dir, self.perf = "", "perf"

    def remember(self, caps, pid):
        with self.lock:
            self.caps, self.pid = caps, pid
        keep_probe(self.state_dir, probe_fingerprint(self.perf), caps, pid)

    def recall(self, pid):
        """(capabilities, the pid they were probed for, whether from an earlier start) when
        they hold for `pid`, else None."""
        with self.lock:
            if self.caps is not None and (self.pid == pid or self.caps.judged):
                return self.caps, self.pid, False
        kept = recall_kept_probe(self.state_dir, probe_fingerprint(self.perf), pid)
        if kept is None:
            return None
        with self.lock:
            self.caps, self.pid = kept, pid
        return kept, pid, True


PROBED = ProbeMemory()


# ================================================================================ log lines

class LinePattern(object):
    """What a log line must hold for --trigger-log FILE:REGEX to fire: a pattern compiled to a
    program whose threads all run in step over the line (a Pike VM without captures), so time is
    linear in the line times the program whatever the pattern (re backtracks: (a+)+$ would stall
    the agent on one line). The C++ agent's line_pattern reads and matches alike: the syntax,
    limits, errors and program listing are the same (src/agent/line_pattern.hpp)."""

    MAX_PATTERN, MAX_PROGRAM, MAX_LINE, MAX_REPEAT = 512, 1024, 16384, 100
    BYTE, ANY, SET, SPLIT, JUMP, BOL, EOL, MATCH = range(8)
    NAMES = ("byte", "any", "set", "split", "jump", "bol", "eol", "match")

    class Error(Exception):
        pass

    def __init__(self, pattern):
        """`pattern`: bytes. Raises LinePattern.Error with the reason when it cannot be used."""
        if len(pattern) > self.MAX_PATTERN:
            raise self.Error("the pattern is longer than %d bytes" % self.MAX_PATTERN)
        self.p, self.at, self.sets, self.prog, self.emitted = pattern, 0, [], [], 0
        tree = self._alternation(0)
        if self.at < len(self.p):
            raise self.Error("unbalanced ')'")
        self._emit(tree)
        self._push([self.MATCH, 0, 0, 0])
        del self.p

    # ---- parsing: ("empty",) ("byte", c) ("any",) ("set", i) ("bol",) ("eol",)
    # ("cat", [..]) ("alt", [..]) ("rep", node, min, max)
    def _peek(self):
        return self.p[self.at] if self.at < len(self.p) else None

    def _alternation(self, depth):
        if depth > 100:
            raise self.Error("groups nested deeper than 100")
        first = self._concatenation(depth)
        if self._peek() != 0x7c:
            return first
        kids = [first]
        while self._peek() == 0x7c:
            self.at += 1
            kids.append(self._concatenation(depth))
        return ("alt", kids)

    def _digit_after(self, i):
        return i + 1 < len(self.p) and 0x30 <= self.p[i + 1] <= 0x39

    def _concatenation(self, depth):
        kids = []
        while self.at < len(self.p) and self.p[self.at] not in (0x7c, 0x29):
            c = self.p[self.at]
            if c in (0x2a, 0x2b, 0x3f) or (c == 0x7b and self._digit_after(self.at)):
                raise self.Error("nothing to repeat before '%s'" % chr(c))
            a = self._atom(depth)
            while self.at < len(self.p):
                q = self._quantified(a)
                if q is None:
                    break
                a = q
            kids.append(a)
        return ("cat", kids)

    def _number(self):
        n = 0
        while self.at < len(self.p) and 0x30 <= self.p[self.at] <= 0x39 and n <= 1000:
            n = n * 10 + self.p[self.at] - 0x30
            self.at += 1
        return n

    def _quantified(self, a):
        c = self.p[self.at]
        lo, hi = 0, -1
        if c == 0x2a:
            self.at += 1
        elif c == 0x2b:
            lo = 1
            self.at += 1
        elif c == 0x3f:
            hi = 1
            self.at += 1
        elif c == 0x7b and self._digit_after(self.at):
            self.at += 1
            lo = self._number()
            hi = lo
            if self._peek() == 0x2c:
                self.at += 1
                p = self._peek()
                hi = self._number() if p is not None and 0x30 <= p <= 0x39 else -1
            if self._peek() != 0x7d:
                raise self.Error("a repetition {m,n} without its '}'")
            self.at += 1
            if lo > self.MAX_REPEAT or hi > self.MAX_REPEAT or (0 <= hi < lo):
                raise self.Error("a repetition {m,n} needs m <= n <= %d" % self.MAX_REPEAT)
        else:
            return None
        return ("rep", a, lo, hi)

    def _set_node(self, words):
        self.sets.append(words)
        return ("set", len(self.sets) - 1)

    def _atom(self, depth):
        c = self.p[self.at]
        self.at += 1
        if c == 0x28:
            inside = self._alternation(depth + 1)
            if self._peek() != 0x29:
                raise self.Error("unbalanced '('")
            self.at += 1
            return inside
        if c == 0x2e:
            return ("any",)
        if c == 0x5e:
            return ("bol",)
        if c == 0x24:
            return ("eol",)
        if c == 0x5b:
            return self._bracket()
        if c == 0x5c:
            return self._escape()
        return ("byte", c)

    @staticmethod
    def _punctuation(c):
        return (0x21 <= c <= 0x2f or 0x3a <= c <= 0x40 or 0x5b <= c <= 0x60 or
                0x7b <= c <= 0x7e or c == 0x20)

    @staticmethod
    def _class_escape(e, s):
        """\\d \\w \\s (upper case: their complements) added to the set of bytes `s`; False for
        another letter."""
        low = e | 0x20
        if low == 0x64:
            c = set(range(0x30, 0x3a))
        elif low == 0x77:
            c = set(range(0x30, 0x3a)) | set(range(0x61, 0x7b)) | set(range(0x41, 0x5b)) | {0x5f}
        elif low == 0x73:
            c = {0x20, 0x09, 0x0a, 0x0d, 0x0c, 0x0b}
        else:
            return False
        if 0x41 <= e <= 0x5a:
            c = set(range(256)) - c
        s |= c
        return True

    def _escape(self):
        if self.at >= len(self.p):
            raise self.Error("a '\\' at the end")
        e = self.p[self.at]
        self.at += 1
        s = set()
        if self._class_escape(e, s):
            return self._set_node(s)
        if 0x31 <= e <= 0x39:
            raise self.Error("back-references (\\%s) are not supported" % chr(e))
        if e in (0x74, 0x6e, 0x72):
            return ("byte", {0x74: 9, 0x6e: 10, 0x72: 13}[e])
        if self._punctuation(e):
            return ("byte", e)
        raise self.Error("unknown escape \\%s" % chr(e))

    def _named_class(self, name, s):
        if name == b"digit":
            return self._class_escape(0x64, s)
        if name == b"space":
            return self._class_escape(0x73, s)
        if name in (b"alpha", b"alnum", b"upper", b"lower", b"xdigit"):
            if name in (b"alpha", b"alnum", b"upper"):
                s |= set(range(0x41, 0x5b))
            if name in (b"alpha", b"alnum", b"lower"):
                s |= set(range(0x61, 0x7b))
            if name in (b"alnum", b"xdigit"):
                s |= set(range(0x30, 0x3a))
            if name == b"xdigit":
                s |= set(range(0x61, 0x67)) | set(range(0x41, 0x47))
            return True
        if name == b"punct":
            s |= set(c for c in range(0x21, 0x7f) if self._punctuation(c))
            return True
        return False

    def _bracket(self):
        s = set()
        negate = False
        if self._peek() == 0x5e:
            negate = True
            self.at += 1
        first = True
        while True:
            if self.at >= len(self.p):
                raise self.Error("a '[' without its ']'")
            c = self.p[self.at]
            if c == 0x5d and not first:
                self.at += 1
                break
            first = False
            if c == 0x5b and self.at + 1 < len(self.p) and self.p[self.at + 1] == 0x3a:
                end = self.p.find(b":]", self.at + 2)
                if end < 0:
                    raise self.Error("a '[:' without its ':]'")
                name = self.p[self.at + 2:end]
                if not self._named_class(name, s):
                    raise self.Error("unknown class [:%s:]" % name.decode("latin-1"))
                self.at = end + 2
                continue
            self.at += 1
            lo = c
            if c == 0x5c:
                if self.at >= len(self.p):
                    raise self.Error("a '\\' at the end")
                e = self.p[self.at]
                self.at += 1
                if self._class_escape(e, s):
                    continue
                if e in (0x74, 0x6e, 0x72):
                    lo = {0x74: 9, 0x6e: 10, 0x72: 13}[e]
                elif self._punctuation(e):
                    lo = e
                else:
                    raise self.Error("unknown escape \\%s" % chr(e))
            if self.at + 1 < len(self.p) and self.p[self.at] == 0x2d and self.p[self.at + 1] != 0x5d:
                hi = self.p[self.at + 1]
                self.at += 2
                if hi == 0x5c:
                    if self.at >= len(self.p) or not self._punctuation(self.p[self.at]):
                        raise self.Error("a range's end must be a character")
                    hi = self.p[self.at]
                    self.at += 1
                if hi < lo:
                    raise self.Error("a range from '%s' down to '%s'" % (chr(lo), chr(hi)))
                s |= set(range(lo, hi + 1))
            else:
                s.add(lo)
        if negate:
            s = set(range(256)) - s
        return self._set_node(s)

    # ---- the program: [op, byte, x, y]
    def _push(self, inst):
        if len(self.prog) >= self.MAX_PROGRAM:
            raise self.Error("the pattern makes more than %d steps (its repetitions multiply)"
                             % self.MAX_PROGRAM)
        self.prog.append(inst)
        return len(self.prog) - 1

    def _emit(self, n):
        # (Counted too: a repetition of a part that makes no step would be walked without end.)
        self.emitted += 1
        if self.emitted > 16 * self.MAX_PROGRAM:
            raise self.Error("the pattern makes more than %d steps (its repetitions multiply)"
                             % self.MAX_PROGRAM)
        k = n[0]
        if k == "empty":
            return
        if k == "byte":
            self._push([self.BYTE, n[1], 0, 0])
        elif k == "any":
            self._push([self.ANY, 0, 0, 0])
        elif k == "set":
            self._push([self.SET, 0, n[1], 0])
        elif k == "bol":
            self._push([self.BOL, 0, 0, 0])
        elif k == "eol":
            self._push([self.EOL, 0, 0, 0])
        elif k == "cat":
            for kid in n[1]:
                self._emit(kid)
        elif k == "alt":
            jumps = []
            kids = n[1]
            for i, kid in enumerate(kids):
                if i + 1 < len(kids):
                    split = self._push([self.SPLIT, 0, 0, 0])
                    self.prog[split][2] = len(self.prog)
                    self._emit(kid)
                    jumps.append(self._push([self.JUMP, 0, 0, 0]))
                    self.prog[split][3] = len(self.prog)
                else:
                    self._emit(kid)
            for j in jumps:
                self.prog[j][2] = len(self.prog)
        else:  # rep
            body, lo, hi = n[1], n[2], n[3]
            for _ in range(lo):
                self._emit(body)
            if hi < 0:
                loop = self._push([self.SPLIT, 0, 0, 0])
                self.prog[loop][2] = len(self.prog)
                self._emit(body)
                self._push([self.JUMP, 0, loop, 0])
                self.prog[loop][3] = len(self.prog)
                return
            splits = []
            for _ in range(lo, hi):
                splits.append(self._push([self.SPLIT, 0, 0, 0]))
                self.prog[splits[-1]][2] = len(self.prog)
                self._emit(body)
            for s in splits:
                self.prog[s][3] = len(self.prog)

    def matches(self, line):
        """Whether the pattern matches somewhere in `line` (bytes; its first MAX_LINE)."""
        line = line[:self.MAX_LINE]
        prog, size = self.prog, len(self.prog)
        mark = [0] * size
        state = {"gen": 0, "matched": False}

        def add(lst, start, pos):
            gen = state["gen"]
            stack = [start]
            while stack:
                pc = stack.pop()
                if pc >= size or mark[pc] == gen:
                    continue
                mark[pc] = gen
                op, _, x, y = prog[pc]
                if op == self.JUMP:
                    stack.append(x)
                elif op == self.SPLIT:
                    stack.append(y)
                    stack.append(x)
                elif op == self.BOL:
                    if pos == 0:
                        stack.append(pc + 1)
                elif op == self.EOL:
                    if pos == len(line):
                        stack.append(pc + 1)
                elif op == self.MATCH:
                    state["matched"] = True
                else:
                    lst.append(pc)

        state["gen"] += 1
        now = []
        add(now, 0, 0)
        sets = self.sets
        for pos in range(len(line)):
            if state["matched"]:
                break
            c = line[pos]
            state["gen"] += 1
            nxt = []
            for pc in now:
                op, b, x, _ = prog[pc]
                if (op == self.BYTE and b == c) or op == self.ANY or (op == self.SET and c in sets[x]):
                    add(nxt, pc + 1, pos + 1)
            add(nxt, 0, pos + 1)
            now = nxt
        return state["matched"]

    def listing(self):
        """The program, one instruction a line, as the C++ agent writes it."""
        out = []
        for pc, (op, b, x, y) in enumerate(self.prog):
            name = self.NAMES[op]
            if op == self.BYTE:
                out.append("%d %s %d\n" % (pc, name, b))
            elif op == self.SET:
                words = [0, 0, 0, 0]
                for c in self.sets[x]:
                    words[c >> 6] |= 1 << (c & 63)
                out.append("%d %s %016x%016x%016x%016x\n" % (pc, name, words[3], words[2],
                                                             words[1], words[0]))
            elif op == self.SPLIT:
                out.append("%d %s %d %d\n" % (pc, name, x, y))
            elif op == self.JUMP:
                out.append("%d %s %d\n" % (pc, name, x))
            else:
                out.append("%d %s\n" % (pc, name))
        return "".join(out)


# ================================================================================ perf: collection

LOST_RE = re.compile(rb"PERF_RECORD_LOST lost (\d+)")


# ================================================================================ flight recorder
# flight.hpp and triggers.hpp in the C++ agent: the window kept on the device, when a capture
# begins, grows and ends, and what fires it.


class FlightRing(object):
    """The last `window` seconds of chunks, oldest first, within `cap` bytes; past the cap the
    oldest go too, counted, and held_span() says how much is left — never silently."""

    def __init__(self, window, cap, began=None):
        self.window, self.cap = window, cap
        self.held = collections.deque()  # (at, chunk)
        self.bytes = self.dropped_for_room = 0
        self.before_front = began  # the chunk let go last: its time

    def _let_go(self):
        at, chunk = self.held.popleft()
        self.before_front = at
        self.bytes -= len(chunk)

    def add(self, at, chunk):
        self.bytes += len(chunk)
        self.held.append((at, chunk))
        while len(self.held) > 1 and self.held[0][0] < at - self.window:
            self._let_go()  # ended before the window began: holds nothing of it
        while len(self.held) > 1 and self.bytes > self.cap:
            self.dropped_for_room += 1
            self._let_go()

    def take(self):
        out = [chunk for _, chunk in self.held]
        if self.held:
            self.before_front = self.held[-1][0]
        self.held.clear()
        self.bytes = 0
        return out

    def restart(self, at):
        self.before_front = at

    def held_span(self):
        if not self.held:
            return 0.0
        front = self.before_front if self.before_front is not None else self.held[0][0]
        return self.held[-1][0] - front

    def span_to(self, now):
        """From the oldest chunk's start to `now` (a capture's window, up to its firing)."""
        if not self.held:
            return 0.0
        front = self.before_front if self.before_front is not None else self.held[0][0]
        return max(now - front, self.held_span())


class CapturePlan(object):
    """When captures begin, grow and end: a firing while none runs begins one (its window,
    then `after`); one during a capture extends it to `after` past then, up to `max_length`
    from its beginning; at most one begins per `min_gap`."""
    MAX_FIRES = 16

    def __init__(self, after=10.0, min_gap=60.0, max_length=600.0):
        self.after, self.min_gap, self.max_length = min(after, max_length), min_gap, max_length
        self.capturing, self.began, self.until, self.last_began = False, 0.0, 0.0, None
        self.fires, self.fired, self.refused = [], 0, 0

    def fire(self, now, what):
        if self.capturing:
            self.fired += 1
            if len(self.fires) < self.MAX_FIRES:
                self.fires.append((what, now))
            self.until = max(self.until, min(now + self.after, self.began + self.max_length))
            return "extended"
        if self.last_began is not None and now - self.last_began < self.min_gap:
            self.refused += 1
            return "refused"
        self.capturing, self.began, self.last_began = True, now, now
        self.until = now + self.after
        self.fires, self.fired = [(what, now)], 1
        return "begun"

    def extend(self, now):
        if self.capturing:
            self.until = max(self.until, min(now + self.after, self.began + self.max_length))

    def over(self, now):
        if not self.capturing or now < self.until:
            return False
        self.capturing = False
        return True


class ThresholdTrigger(object):
    """A reading at or above `level` for `hold` seconds fires once; again only after it fell
    below (or unlatch(): its firing was refused)."""

    def __init__(self, level, hold):
        self.level, self.hold = level, hold
        self.above_since, self.fired = None, False

    def feed(self, at, value):
        if not value >= self.level:  # (NaN is below)
            self.above_since, self.fired = None, False
            return False
        if self.above_since is None:
            self.above_since = at
        if self.fired or at - self.above_since < self.hold:
            return False
        self.fired = True
        return True

    def unlatch(self):
        self.fired = False

    def above(self):
        return self.above_since is not None


THRESHOLD_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_threshold(spec, max_level):
    """"PCT[:SECONDS]": (level, hold seconds), or the reason it is not one."""
    level_text, colon, hold_text = spec.partition(":")

    def number(t):
        if not THRESHOLD_NUMBER.match(t):
            return None
        v = float(t)
        return v if math.isfinite(v) else None
    level = number(level_text)
    if level is None or not 0 < level <= max_level:
        return None, "the level must be a number above 0 and at most %d: '%s'" % (
            int(max_level), level_text)
    hold = 1.0
    if colon:
        hold = number(hold_text)
        if hold is None or not 0 <= hold <= 3600:
            return None, "how long it must hold is seconds from 0 to 3600: '%s'" % hold_text
    return (level, hold), None


MAX_CPU_LEVEL, MAX_LOAD_LEVEL = 100.0 * 4096, 100000.0
TRIGGER_FLAGS = (("cpu", "trigger-cpu"), ("memory", "trigger-memory"), ("load", "trigger-load"),
                 ("log", "trigger-log"), ("process", "trigger-process"),
                 ("file", "trigger-file"))


def split_log_trigger(spec):
    path, colon, pattern = (spec or "").partition(":")
    return (path, pattern) if colon else None


def valid_process_name(name):
    raw = name.encode("utf-8", "surrogateescape")
    return 0 < len(raw) <= 15 and not any(b < 0x20 or b == 0x7f or b == 0x2f for b in
                                          bytearray(raw))


def _path_problem(path, flag):
    if not path.startswith("/"):
        return "%s takes an absolute path: '%s'" % (flag, path)
    folder = path[:max(path.rfind("/"), 1)]
    if not os.path.isdir(folder):
        return "%s: no directory %s" % (flag, folder)
    return ""


def check_triggers(t, has_pid):
    """Why these triggers (a dict: cpu, memory, load, log, process, file) cannot work; ""
    when they can."""
    for key, flag, most in (("cpu", "--trigger-cpu", MAX_CPU_LEVEL),
                            ("memory", "--trigger-memory", 100.0),
                            ("load", "--trigger-load", MAX_LOAD_LEVEL)):
        if t.get(key):
            _, why = parse_threshold(t[key], most)
            if why:
                return flag + ": " + why
            if key == "cpu" and not has_pid:
                return "--trigger-cpu needs --pid: the process whose CPU it watches"
    if t.get("log"):
        parts = split_log_trigger(t["log"])
        if parts is None:
            return "--trigger-log takes FILE:REGEX (a ':' between the log and the pattern)"
        why = _path_problem(parts[0], "--trigger-log")
        if why:
            return why
        try:
            LinePattern(parts[1].encode("utf-8", "surrogateescape"))
        except LinePattern.Error as e:
            return "--trigger-log: %s" % e
    if t.get("process") and not valid_process_name(t["process"]):
        return ("--trigger-process takes a process name as ps shows it (1-15 bytes, no '/'): "
                "'%s'" % t["process"])
    if t.get("file"):
        return _path_problem(t["file"], "--trigger-file")
    return ""


class LogTail(object):
    """A log read as it grows (log_tail in the C++ agent): the complete lines added since the
    last poll; a rotated one read to its end then the new from its start, a truncated one from
    its start, a missing one waited for; at most MAX_READ bytes a poll."""
    MAX_READ = 1 << 20

    def __init__(self, path):
        self.path, self.fd, self.ident, self.offset = path, None, None, 0
        self.partial, self.skipping, self.first_open, self.problem = b"", False, True, ""

    def _close(self):
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.partial, self.skipping = None, b"", False

    def _read(self, out, budget):
        while budget[0] > 0:
            try:
                got = os.pread(self.fd, min(65536, budget[0]), self.offset)
            except OSError:
                return
            if not got:
                return
            self.offset += len(got)
            budget[0] -= len(got)
            while got:
                nl = got.find(b"\n")
                piece = got if nl < 0 else got[:nl]
                if not self.skipping:
                    room = LinePattern.MAX_LINE - len(self.partial)
                    self.partial += piece[:room]
                    self.skipping = len(piece) > room
                if nl < 0:
                    break
                out.append(self.partial)
                self.partial, self.skipping = b"", False
                got = got[nl + 1:]

    def poll(self):
        out, budget = [], [self.MAX_READ]
        try:
            st = os.stat(self.path)
        except OSError as e:
            if self.fd is not None:
                self._read(out, budget)
                self._close()
            self.first_open = False
            self.problem = ("no file %s (waiting for it)" % self.path if e.errno == errno.ENOENT
                            else "cannot see %s: %s" % (self.path, os_message(e)))
            return out
        if self.fd is not None and (st.st_dev, st.st_ino) != self.ident:
            self._read(out, budget)  # rotated: the old one's last lines first
            self._close()
        if self.fd is None:
            first, self.first_open = self.first_open, False
            if not stat.S_ISREG(st.st_mode):
                self.problem = self.path + " is not a regular file"
                return out
            # A link in a directory anyone may write to (/tmp) could be anyone's, to any file
            # this agent (root) may read: not followed.
            try:
                link = os.lstat(self.path)
                folder = os.stat(self.path[:max(self.path.rfind("/"), 1)])
                if stat.S_ISLNK(link.st_mode) and folder.st_mode & stat.S_IWOTH and \
                        link.st_uid != 0:
                    self.problem = (self.path + " is a link in a directory anyone may write to: "
                                    "not followed")
                    return out
            except OSError:
                pass
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK |
                                  getattr(os, "O_CLOEXEC", 0))
                opened = os.fstat(self.fd)
            except OSError as e:
                self._close()
                self.problem = "cannot read %s: %s" % (self.path, os_message(e))
                return out
            if not stat.S_ISREG(opened.st_mode):
                self._close()
                self.problem = "cannot read %s: not a regular file" % self.path
                return out
            self.ident = (opened.st_dev, opened.st_ino)
            self.offset = opened.st_size if first else 0  # what it held at the start is old
            self.problem = ""
        else:
            try:
                if os.fstat(self.fd).st_size < self.offset:  # cut short (copytruncate)
                    self.offset, self.partial, self.skipping = 0, b"", False
            except OSError:
                pass
        self._read(out, budget)
        return out


class ProcessWatch(object):
    """Processes whose name (comm) is `name`: [(pid, started)] since the last poll."""

    def __init__(self, name, proc_root="/proc"):
        self.name, self.root, self.first, self.seen = name, proc_root, True, {}

    def poll(self):
        now = {}
        try:
            entries = os.listdir(self.root)
        except OSError:
            entries = []
        for entry in entries:
            if not entry.isdigit():
                continue
            comm = read_text("%s/%s/comm" % (self.root, entry))
            if comm is None or comm.rstrip("\n") != self.name:
                continue
            st = parse_pid_stat(read_text("%s/%s/stat" % (self.root, entry)))
            if st is not None and st["state"] != "Z":  # a zombie has exited
                now[int(entry)] = st["start_time"]
        out = []
        if not self.first:
            out = [(pid, False) for pid, start in sorted(self.seen.items())
                   if now.get(pid) != start]
            out += [(pid, True) for pid, start in sorted(now.items())
                    if self.seen.get(pid) != start]
        self.first, self.seen = False, now
        return out


class FileWatch(object):
    """A file that appears or is touched: poll() is True once per change (not at the first)."""

    def __init__(self, path):
        self.path, self.first, self.seen = path, True, None

    def poll(self):
        try:
            now = os.stat(self.path).st_mtime_ns
        except OSError:
            now = None
        changed = not self.first and now is not None and now != self.seen
        self.first, self.seen = False, now
        return changed


def line_said(line):
    text = line[:160].decode("utf-8", "replace")
    text = "".join("?" if ord(c) < 0x20 or ord(c) == 0x7f else c for c in text)
    return text + ("\u2026" if len(line) > 160 else "")


class TriggerWatch(object):
    """Every trigger of a flight recorder on the device, polled together (trigger_watch)."""

    def __init__(self, t, pid):
        self.t, self.pid = dict(t), pid
        self.levels = {}
        for key, most in (("cpu", MAX_CPU_LEVEL), ("memory", 100.0), ("load", MAX_LOAD_LEVEL)):
            if t.get(key):
                spec, _ = parse_threshold(t[key], most)
                if spec is not None:
                    self.levels[key] = ThresholdTrigger(spec[0], spec[1])
        self.cpu_pct = self.memory_pct = self.load = None
        self.cpu_seen = None
        self.log = self.pattern = self.processes = self.file = None
        parts = split_log_trigger(t.get("log"))
        if parts is not None:
            try:
                self.pattern = LinePattern(parts[1].encode("utf-8", "surrogateescape"))
                self.log = LogTail(parts[0])
                self.log.poll()  # from here on: what it holds now is old news
            except LinePattern.Error:
                pass
        if t.get("process"):
            self.processes = ProcessWatch(t["process"])
            self.processes.poll()
        if t.get("file"):
            self.file = FileWatch(t["file"])
            self.file.poll()
        self.next_process_scan = 0.0

    def poll(self, now):
        fired, holding = [], [False]

        def level(key, value, say):
            t = self.levels[key]
            if t.feed(now, value):
                fired.append(say(value, t.hold))
            elif t.above():
                holding[0] = True  # a spike that lasts: so does its capture
        if "cpu" in self.levels and self.pid is not None:
            st = parse_pid_stat(read_text("/proc/%d/stat" % self.pid))
            if st is not None:
                ticks = st["utime"] + st["stime"]
                before, self.cpu_seen = self.cpu_seen, (ticks, now)
                if before is not None and now > before[1]:
                    self.cpu_pct = 100.0 * (ticks - min(ticks, before[0])) / float(CLK_TCK) / \
                        (now - before[1])
                    level("cpu", self.cpu_pct, lambda v, h: (
                        "process %d at %.0f %% of a core for %.1f s (--trigger-cpu %s)"
                        % (self.pid, v, h, self.t["cpu"])))
        if "memory" in self.levels:
            text = read_text("/proc/meminfo")
            if text is not None:
                self.memory_pct = parse_meminfo(text)["used_pct"]
                level("memory", self.memory_pct, lambda v, h: (
                    "memory in use at %.0f %% for %.1f s (--trigger-memory %s)"
                    % (v, h, self.t["memory"])))
        if "load" in self.levels:
            text = read_text("/proc/loadavg")
            if text is not None:
                self.load = to_float((text.split() or ["0"])[0])
                level("load", self.load, lambda v, h: (
                    "load average %.2f for %.1f s (--trigger-load %s)" % (v, h, self.t["load"])))
        if self.log is not None:
            for line in self.log.poll():
                if self.pattern.matches(line):
                    fired.append("log %s: %s" % (self.log.path, line_said(line)))
                    break  # (one capture: the first line that matched says why)
        if self.processes is not None and now >= self.next_process_scan:
            self.next_process_scan = now + 1.0  # every process read: once a second
            for pid, started in self.processes.poll():
                fired.append("process %s %s (pid %d)" % (self.t["process"],
                                                         "started" if started else "exited", pid))
        if self.file is not None and self.file.poll():
            fired.append(self.t["file"] + " touched (--trigger-file)")
        return fired, holding[0]

    def refused(self):
        for t in self.levels.values():
            t.unlatch()

    def log_problem(self):
        return self.log.problem if self.log is not None else ""


def triggers_json(t):
    return dict((k, v) for k, v in t.items() if v)


def flight_record(fl, ts):
    """A flight recorder's window now, what fires it and what fired (metrics and status)."""
    w = {"type": "flight", "ts": ts, "window_s": float(fl.settings["window"]),
         "held_s": fl.ring.held_span(), "after_s": float(fl.settings["after"]),
         "held_bytes": fl.ring.bytes, "memory_bytes": fl.settings["memory_bytes"],
         "cut_for_room": fl.ring.dropped_for_room, "captures": fl.captures,
         "refused": fl.plan.refused, "capturing": fl.plan.capturing,
         "triggers": triggers_json(fl.settings["triggers"])}
    for key, value in (("cpu_pct", fl.watch.cpu_pct), ("memory_pct", fl.watch.memory_pct),
                       ("load", fl.watch.load)):
        if value is not None:
            w[key] = value
    if fl.watch.log_problem():
        w["log_problem"] = fl.watch.log_problem()
    if fl.plan.fires:
        w["last_fired"] = fl.plan.fires[0][0]
    return w


class FlightState(object):
    """A flight recorder under way (flight_state): the window held, the captures, the
    triggers. While no capture runs the run's chunks go to the ring, not the outbox."""

    def __init__(self, asked, pid):
        self.settings = asked
        self.ring = FlightRing(asked["window"], asked["memory_bytes"], monotonic())
        self.plan = CapturePlan(asked["after"], asked.get("min_gap", 60.0))
        self.watch = TriggerWatch(asked["triggers"], pid)
        self.captures = 0
        self.draining = None  # a capture's time is over, its last chunk being cut
        self.refusing = False

    def holding(self):
        return not self.plan.capturing and self.draining is None


FLIGHT_SIGNALLED = threading.Event()  # SIGUSR1: a script on the device asks for a capture


class OverheadGovernor(object):
    """An overhead budget (--max-overhead PCT of one core; overhead_governor in the C++ agent):
    given what profiling cost over each interval at the rate in use, the rate to use next —
    down when over by a tenth (DWARF given up for frame pointers first), after two readings
    (one when over twice the budget), back up only when six say it is well under, at most
    doubling, never past what was asked; the three intervals after a start or a change are not
    judged (perf starting; one along a ladder of rates perf holds, where nothing restarts).
    From one rate read all of the cost is the rate's; once two rates were read, cost = fixed +
    per_hz x rate."""
    SETTLE = 3  # intervals not judged after a start or a change
    RUNG_RATIO = 0.8

    def __init__(self, budget_pct, asked_hz, dwarf, fp_works, min_hz=1, rungs=0):
        self.budget, self.asked_hz, self.dwarf, self.fp_works = budget_pct, asked_hz, dwarf, \
            fp_works
        self.min_hz = max(1, min(min_hz, asked_hz))
        self.skip, self.last_cost = self.SETTLE, 0.0  # (perf's start, its symbols loaded)
        self.before = None  # (hz, cost): the rate before this one, as its readings judged it
        self.at = [-1, [], 0]  # the rate in use, its last five readings and their count
        self.hz = asked_hz  # the rate to sample at now (what was asked stays the run's)
        # Rates perf record holds at once (asked x 0.8^k, `rungs` of them): a change among them
        # restarts nothing, so it is judged from the next interval on.
        self.rungs = rungs
        self.ladder = self._make_ladder()

    def _make_ladder(self):
        out, hz = [], float(self.asked_hz)
        for _ in range(self.rungs if self.rungs >= 2 else 0):
            r = int(math.floor(hz + 0.5))
            if r < self.min_hz or (out and r >= out[-1]):
                break
            out.append(r)
            hz *= self.RUNG_RATIO
        return out if len(out) >= 2 else []

    def _rung_at_or_under(self, nxt):
        """`nxt` as the ladder's highest rate at or under it, where the ladder reaches so low
        (under it: the rate itself, a restart)."""
        if not self.ladder or nxt < self.ladder[-1]:
            return nxt
        return next(r for r in self.ladder if r <= nxt)

    def feed_now(self, cost):
        """The cost of the last interval at the rate held now; a change is taken as made."""
        change = self.feed(cost, self.hz)
        if change is not None:
            self.hz = change[0]
        return change

    def restarted(self):
        """The change answered last restarted perf after all (the ladder's rate could not be
        set): its start is not judged."""
        self.skip = self.SETTLE

    def ask(self, hz):
        """The user set another rate (configure): asked and used from now."""
        self.asked_hz = self.hz = max(1, hz)
        self.min_hz = min(self.min_hz, self.asked_hz)
        self.before, self.at, self.skip = None, [-1, [], 0], self.SETTLE
        self.ladder = self._make_ladder()

    def effective(self, settings):
        """`settings` at the rate and call graphs it holds now (a copy)."""
        s = copy.copy(settings)
        s.frequency = self.hz
        s.ladder = self.ladder if self.hz in self.ladder else None  # (held at once, where on it)
        s.prompt = False  # (perf woken per sample costs more at 300 Hz than buffered at 999)
        if not self.dwarf and s.callgraph == "dwarf":
            s.callgraph = "fp"
        return s

    def _aim(self, cost, hz, budget):
        proportional = hz * budget / cost if cost > 0 else 2.0 * hz
        if self.before is not None and self.before[0] != hz:
            # Trusted only where it leaves the rate room: a fixed part at or over the aim is
            # likelier two noisy readings than a cost no rate meets (the proportional step then:
            # a fixed part truly over still walks the rate down); never under half that step.
            per_hz = (cost - self.before[1]) / (hz - self.before[0])
            fixed = cost - per_hz * hz
            if per_hz > 0 and 0 <= fixed < budget:
                return max((budget - fixed) / per_hz, proportional / 2)
        return proportional

    def feed(self, cost, hz):
        """(frequency, to_fp, why) for a change, else None: as agent/overhead.hpp's governor,
        reading for reading."""
        self.last_cost = cost
        if self.skip > 0:
            self.skip -= 1
            return None
        if not cost >= 0 or hz <= 0:
            return None
        if self.at[0] != hz:
            self.at = [hz, [], 0]
        self.at[1].append(cost)
        del self.at[1][:-5]
        self.at[2] += 1
        ordered = sorted(self.at[1])
        k = len(ordered)
        if k >= 3:  # the median from three on: one noisy interval moves nothing
            cost = ordered[k // 2] if k % 2 else (ordered[k // 2 - 1] + ordered[k // 2]) / 2
        else:
            cost = sum(c / k for c in ordered)
        budget = self.budget
        first_rate = self.before is None  # (after a change: three readings, the restart's tail)

        def changed(nxt):
            # Along the ladder perf holds nothing restarts: the next interval is the rate's.
            cheap = nxt != hz and hz in self.ladder and nxt in self.ladder
            self.skip, self.before, self.at = 1 if cheap else self.SETTLE, (hz, cost), [-1, [], 0]
        # down when over by a tenth at the first rate, by a fifth at one this chose
        if cost > budget * (1.1 if first_rate else 1.2) and (
                (self.at[2] >= 2 or cost > budget * 2) if first_rate else self.at[2] >= 3):
            if self.dwarf and self.fp_works:
                self.dwarf = False
                changed(hz)
                self.before = None  # (another call-graph mode: another cost per Hz)
                return hz, True, ("profiling cost %.2f %% of a core, over --max-overhead %.2f %%: "
                                  "frame-pointer call graphs instead of DWARF" % (cost, budget))
            nxt = self._rung_at_or_under(
                int(min(max(math.floor(self._aim(cost, hz, budget * 0.9)), self.min_hz), hz)))
            if nxt == hz:
                return None
            changed(nxt)
            return nxt, False, ("profiling cost %.2f %% of a core at %d Hz, over --max-overhead "
                                "%.2f %%: sampling at %d Hz" % (cost, hz, budget, nxt))
        # up after six readings under half; along the ladder (nothing restarts) one rate up as
        # soon as three say its cost, grown with the rate, stays under the aim
        nxt = 0
        if self.at[2] >= 6 and cost < budget * 0.5 and hz < self.asked_hz:
            nxt = self._rung_at_or_under(int(min(max(
                math.floor(min(self._aim(cost, hz, budget * 0.9), 2.0 * hz)), hz), self.asked_hz)))
        elif self.at[2] >= 3 and hz in self.ladder and hz != self.ladder[0]:
            above = self.ladder[self.ladder.index(hz) - 1]
            if cost * above / hz < budget * 0.9:
                nxt = above
        if nxt > hz:
            changed(nxt)
            return nxt, False, ("profiling cost %.2f %% of a core at %d Hz, under --max-overhead "
                                "%.2f %%: sampling at %d Hz (asked: %d)"
                                % (cost, hz, budget, nxt, self.asked_hz))
        return None

class CostMeter(object):
    """The CPU this agent and its children (perf) used, from /proc/PID/task/*/schedstat (ns;
    clock ticks where there is none): % of one core since the last reading."""

    def __init__(self, proc_root="/proc"):
        self.root, self.seen, self.last_at = proc_root, {}, None

    def _cpu_ns(self, pid):
        base = "%s/%d" % (self.root, pid)
        total, any_ = 0, False
        try:
            tasks = os.listdir(base + "/task")
        except OSError:
            tasks = []
        for t in tasks:
            text = read_text("%s/task/%s/schedstat" % (base, t))
            if text:
                total += u64(text.split()[0])
                any_ = True
        if any_:
            return total
        st = parse_pid_stat(read_text(base + "/stat"))
        return int((st["utime"] + st["stime"]) * 1e9 / CLK_TCK) if st else 0

    def read(self, now):
        ended = []
        while _exits:
            ended.append(_exits.popleft())
        me = os.getpid()
        pids, zombies = [me], []
        try:
            entries = os.listdir(self.root)
        except OSError:
            entries = []
        for e in entries:
            if not e.isdigit() or int(e) == me:
                continue
            text = read_text("%s/%s/stat" % (self.root, e)) or ""
            close = text.rfind(")")
            fields = text[close + 1:].split() if close >= 0 else []
            if len(fields) > 1 and fields[1] == str(me):
                (zombies if fields[0] == "Z" else pids).append(int(e))
        now_ns, used = {}, 0

        def since(pid, ns):
            before = self.seen.get(pid)
            return ns if before is None else ns - min(ns, before)
        # Those that ended since the last reading (taken before the children were listed):
        # what they used up to their end. A pid among them listed again is another child's.
        for pid, ns in ended:
            used += since(pid, ns)
            self.seen.pop(pid, None)
        for pid in zombies:  # (their end is noted as they are reaped)
            if pid in self.seen:
                now_ns[pid] = self.seen[pid]
        for pid in pids:
            ns = self._cpu_ns(pid)
            if ns == 0 and pid in self.seen:
                now_ns[pid] = self.seen[pid]  # (ended while listed: its end counts from here)
                continue
            now_ns[pid] = ns
            used += since(pid, ns)
        self.seen = now_ns
        before, self.last_at = self.last_at, now
        if before is None or now <= before:
            return None
        return 100.0 * used / 1e9 / (now - before)


def last_boundary(s):
    """Index just past the last sample boundary in `s`, or -1. A line that does not start
    with TAB starts a sample; a blank line ends one that has a call chain."""
    if len(s) < 2:
        return -1
    if s.endswith(b"\n\n"):
        return len(s)
    i = s.rfind(b"\n", 0, len(s) - 1)
    while i >= 0:
        if s[i + 1:i + 2] != b"\t":
            return i + 1
        i = s.rfind(b"\n", 0, i)
    return -1


OFF_CPU_EVENT, OFF_CPU_MODULE = b"off-cpu", b"[off-cpu]"


def wait_kind(prev_state):
    """The frame a wait's kind is (as the collector names it): [sleeping] (S), [uninterruptible:
    I/O] (D), [preempted] (R, R+), [off-cpu] when unknown, else [off-cpu: other]."""
    if prev_state == b"S":
        return b"[sleeping]"
    if prev_state == b"D":
        return b"[uninterruptible: I/O]"
    if prev_state[:1] == b"R":
        return b"[preempted]"
    if not prev_state:
        return b"[off-cpu]"
    if b"D" in prev_state:
        return b"[uninterruptible: I/O]"
    if b"S" in prev_state:
        return b"[sleeping]"
    if b"T" in prev_state or b"t" in prev_state:
        return b"[stopped]"
    return b"[off-cpu: other]"


PREV_STATE_RE = re.compile(rb" prev_state=([RSDTtXZPIKWNn+|]{1,8}) ==> ")
# "comm pid/tid [cpu] time: rest", read as the C++ agent's wait_folder reads it: the last such
# thread starting the line or after a blank within its first 66 bytes (a comm is at most 15,
# perf pads it; a thread's name that looks like one comes before its own).
HEAD_RE = re.compile(rb"^(.{0,64})(?:^| )(\d{1,10})(?:/(\d{1,10}))? +(?:\[(\d{1,19})\] +)?"
                     rb"(\d{1,10})\.(\d{1,12}):(.*)$", re.S)
SWITCH_SAMPLE_RE = re.compile(rb" *(?:\d+ +)?sched:sched_switch:")


class WaitFolder(object):
    """Folds an off-CPU recording's scheduler switches into waits on the device, as the C++
    agent does (src/agent/wait_folder.hpp): a thread off the CPU from its sched_switch sample
    until it is back (its PERF_RECORD_SWITCH IN, else its next sample) is sent as time, a
    sample of the event off-cpu weighed by the wait in ns, its stack topped by the wait's kind.
    Waits shorter than the window are summed per thread, kind and stack within each window of
    perf time; a longer one is a sample of its own; waits under min_ns are not sent (counted).
    Every other line passes as it is."""

    MAX_OPEN = MAX_SUMS = 4096
    MAX_STACK, MAX_STACK_LINES = 16384, 256
    MAX_LINE = 1 << 20
    UNKNOWN = b"\t0 [unknown] ([unknown])"

    def __init__(self, min_ns=0, window_ns=100000000):
        self.min_ns, self.window_ns = min_ns, max(1, window_ns)
        self.open = {}  # tid -> [since, pid, comm, kind, stack lines, unseen, stack bytes]
        self.sums = {}  # (tid, kind, stack) -> [window, first, total, pid, comm]
        self.block = None  # None; "pass"; or the tid of a switch sample whose frames come
        self.last_ns = 0  # the latest time read
        self.carry = b""  # a line not ended yet
        self.waits = self.samples = self.short_waits = self.short_ns = self.dropped = 0

    def summary(self):
        """What the folding did, in a line for the log (as the C++ agent says it)."""
        s = "off-CPU: %d waits sent in %d samples" % (self.waits, self.samples)
        if self.min_ns:
            s += "; %d shorter than %d us left out (%d ms in all)" % (
                self.short_waits, self.min_ns // 1000, self.short_ns // 1000000)
        if self.dropped:
            s += ("; %d dropped (more threads waiting at once than the agent follows, or out of "
                  "order)" % self.dropped)
        return s

    def fold(self, complete):
        """Complete samples of perf script text in; what to send for them out. A line cut
        between two pieces (the chunker's overlong tail) is read whole."""
        out = []
        lines = (self.carry + complete).split(b"\n")
        self.carry = lines.pop()  # b"" when the text ended a line
        for l in lines:
            self._line(l, out)
        if len(self.carry) > self.MAX_LINE:
            self._line(self.carry, out)
            self.carry = b""
        return b"\n".join(out) + b"\n" if out else b""

    def _line(self, l, out):
        if not l:  # the blank line that ends a sample with a call chain (a switch's taken)
            if self.block is None or self.block == "pass":
                out.append(b"")
            self.block = None
        elif l[:1] == b"\t":
            if self.block is None or self.block == "pass":
                out.append(l)
            elif self.block != "skip":
                w = self.open.get(self.block)
                if (w is not None and w[6] + len(l) + 1 <= self.MAX_STACK
                        and len(w[4]) < self.MAX_STACK_LINES):
                    w[4].append(l)
                    w[6] += len(l) + 1
        else:
            self._header(l, out)

    def flush(self, ended=False):
        """The sums held, as samples. Waits still open stay open, unless the recording ended
        (a round's: the next is another perf)."""
        out = []
        if ended:
            if self.carry:  # its last line, if perf ended it without a newline
                self._line(self.carry, out)
                self.carry = b""
            # A thread still waiting then waited until the last time printed at least.
            for tid in sorted(t for t, w in self.open.items() if w[0] < self.last_ns):
                self._close(tid, self.last_ns, out)  # (one begun at the last time is no wait)
            self.open.clear()
            self.block = None
        for key, s in sorted(self.sums.items(), key=lambda kv: (
                kv[1][1], kv[0][0], kv[0][1], b"".join(l + b"\n" for l in kv[0][2]))):
            self._write(key[0], s, key[1], key[2], out)
        self.sums.clear()
        return b"\n".join(out) + b"\n" if out else b""

    def _header(self, l, out):
        m = HEAD_RE.match(l)
        if m is None:
            self.block = "pass"
            out.append(l)
            return
        comm, pid, tid, _, sec, frac, rest = m.groups()
        pid = int(pid)
        tid = int(tid) if tid is not None else pid
        if pid > 0xffffffff or tid > 0xffffffff:  # out of range: no header
            self.block = "pass"
            out.append(l)
            return
        t = int(sec) * 1000000000 + int((frac + b"000000000")[:9])
        rest = rest.lstrip(b" ")
        self.block = None
        self.last_ns = max(self.last_ns, t)
        if rest.startswith(b"PERF_RECORD_SWITCH"):
            way = rest.split(b" ")
            way = way[1] if len(way) > 1 else b""
            if way == b"IN":
                self._close(tid, t, out)
            elif way == b"OUT":
                # Its sample usually came first and opened the wait; else the wait begins
                # here, where unknown until its sample follows (perf may have dropped it).
                if tid not in self.open:
                    if len(self.open) >= self.MAX_OPEN:
                        self.dropped += 1
                    else:
                        kind = b"[preempted]" if b" preempt" in rest else b"[off-cpu]"
                        self.open[tid] = [t, pid, comm.strip(b" "), kind, [self.UNKNOWN], True,
                                          len(self.UNKNOWN) + 1]
            else:
                self.block = "pass"
                out.append(l)
            return
        if rest.startswith(b"PERF_RECORD_"):
            self.block = "pass"
            out.append(l)
            return
        sw = SWITCH_SAMPLE_RE.match(rest)
        if sw is None:
            self._close(tid, t, out)  # it runs: back from any wait
            self.block = "pass"
            out.append(l)
            return
        state = PREV_STATE_RE.search(rest, sw.end() - 1)
        kind = wait_kind(state.group(1) if state else b"")
        w = self.open.get(tid)
        if w is not None and w[5]:  # the wait its OUT record began
            w[3], w[4], w[5], w[6] = kind, [], False, 0
        else:
            self._close(tid, t, out)
            if len(self.open) >= self.MAX_OPEN:
                self.dropped += 1
                self.block = "skip"  # its frame lines go with it
                return
            self.open[tid] = [t, pid, comm.strip(b" "), kind, [], False, 0]
        self.block = tid

    def _close(self, tid, t, out):
        w = self.open.pop(tid, None)
        if w is None:
            return
        since, pid, comm, kind, stack = w[0], w[1], w[2], w[3], w[4]
        if t < since:
            self.dropped += 1
            return
        ns = t - since
        if ns < self.min_ns:
            self.short_waits += 1
            self.short_ns += ns
            return
        self.waits += 1
        window = since // self.window_ns
        stack = tuple(stack)
        if ns >= self.window_ns:
            self._write(tid, [window, since, ns, pid, comm], kind, stack, out)
            return
        key = (tid, kind, stack)
        s = self.sums.get(key)
        if s is not None:
            if s[0] == window:
                s[2] += ns
                return
            self._write(tid, s, kind, stack, out)  # its window is over
        elif len(self.sums) >= self.MAX_SUMS:
            out.extend(self.flush().split(b"\n")[:-1])
        self.sums[key] = [window, since, ns, pid, comm]

    def _write(self, tid, s, kind, stack, out):
        self.samples += 1
        out.append(b"%s %d/%d %d.%09d: %d %s:" % (s[4], s[3], tid, s[1] // 1000000000,
                                                   s[1] % 1000000000, s[2], OFF_CPU_EVENT))
        out.append(b"\t0 " + kind + b" (" + OFF_CPU_MODULE + b")")
        out.extend(stack or (self.UNKNOWN,))  # (no call graph)
        out.append(b"")


class Chunker(object):
    """Cuts the endless perf script stream into chunks that end on sample boundaries.
    Complete samples go straight into the compressor; only the unfinished tail of the last
    sample is held as text."""

    MAX_TAIL = 1 << 20

    def __init__(self, compressor, folder=None):
        self.compressor = compressor
        self.folder = folder  # an off-CPU recording's WaitFolder, its sums sent with each chunk
        self.tail = b""
        self.chunk_bytes = self.lost_total = 0

    def _emit(self, complete):
        if complete:
            self.lost_total += sum(int(n) for n in LOST_RE.findall(complete))
            self._put(self.folder.fold(complete) if self.folder else complete)

    def _put(self, text):
        if text:
            self.compressor.write(text)
            self.chunk_bytes += len(text)

    def append(self, data):
        text = self.tail + data if self.tail else data
        b = last_boundary(text)
        if b >= 0:
            self._emit(text[:b])
            text = text[b:]
        self.tail = text
        if len(self.tail) > self.MAX_TAIL:  # no boundary in sight: do not grow without bound
            self._emit(self.tail)
            self.tail = b""

    def cut(self, perf_stat=b"", final=False):
        """The chunk's payload, `perf_stat` after the marker; None when it holds nothing.
        An unfinished sample stays for the next chunk unless `final`."""
        if final:
            self._emit(self.tail)
            self.tail = b""
        if self.folder:  # the waits summed so far go with the chunk
            self._put(self.folder.flush(final))
        if self.chunk_bytes == 0 and not perf_stat:
            return None
        if perf_stat:
            self.compressor.write(PERF_STAT_MARKER + perf_stat)
        self.chunk_bytes = 0
        return self.compressor.finish()


class Collection(object):
    """One run of `perf record -o - | perf script -i -` (or of rounds), with a `perf stat` per
    chunk, in its own thread from start() until perf exits. Every chunk, the last partial one
    included, goes to on_chunk(payload); on_done(self) runs at the end."""

    def __init__(self, perf, settings, compressor, on_chunk, on_done=None, may_flush=None):
        self.perf = perf
        self.s = copy.deepcopy(settings)
        self.chunker = Chunker(compressor, WaitFolder(self.s.off_cpu_min_us * 1000)
                               if self.s.off_cpu else None)
        self.on_chunk, self.on_done = on_chunk, on_done
        # Whether a flush may go now (the link has taken the earlier data): on a slow link
        # chunks grow instead of queueing up.
        self.may_flush = may_flush or (lambda: True)
        self.last_cut = monotonic()
        self.prompt_refused = False  # perf record did not know --no-buffering
        self.lock = threading.Lock()
        self.record = self.script = self.stat = self.kill_at = self.script_kill_at = None
        self.stop_requested = False
        self.chunks = 0
        self.error = ""
        self.record_status = None  # perf record's exit status (the last round's), once ended
        # The process profiled had exited when perf record last ended (never for the whole
        # system): judged after perf's exit, by its start time, so neither a zombie nor a
        # reused pid passes for the target.
        self.target_exited = False
        self.target = None  # as it was when the run began
        self.gap = threading.Event()  # set by a stop: ends the wait after a round cut short
        self.record_err = b""  # what perf record said on stderr (its start, bounded)
        self.script_bytes = 0  # perf script text received
        self.discard = False  # stopped without draining: the unprinted rest is dropped
        self.cut_requested = False  # the chunk being made goes now (a capture's end)
        self.done = threading.Event()
        # A ladder of rates perf record holds (s.ladder): the write end of its control pipe
        # and the rate enabled now.
        self.control, self.rate = None, 0

    def set_rate(self, hz):
        """Samples at `hz` from now, a rate of the ladder perf record holds, without restarting
        it. False when it is not one, or perf no longer listens: a restart is the caller's."""
        with self.lock:
            if self.control is None or hz not in (getattr(self.s, "ladder", None) or []):
                return False
            if hz == self.rate:
                return True
            # A few lines, under PIPE_BUF: written whole or not at all (a perf that stopped
            # reading).
            text = rung_commands(self.s, self.rate, hz).encode()
            try:
                if len(text) > select.PIPE_BUF or os.write(self.control, text) != len(text):
                    return False
            except OSError:
                return False
            self.rate = hz
            return True

    def _close_control(self):
        with self.lock:
            if self.control is not None:
                os.close(self.control)
                self.control = None

    @property
    def lost_samples(self):
        return self.chunker.lost_total

    def start(self):
        start_thread(self._main, "collection")

    def request_stop(self, drain=True):
        """SIGINT to perf record (it flushes, the pipeline drains); SIGKILL to perf record 3 s
        later, to perf script 30 s later (_watchdog). Without `drain`, both are killed at once
        and what perf script has not printed yet is dropped (an unfinished sample too)."""
        with self.lock:
            if self.stop_requested and (drain or self.discard):
                pass
            else:
                self.stop_requested = True
                self.discard = self.discard or not drain
                self._interrupt()
        self.gap.set()

    def request_cut(self):
        """The chunk being made goes at the next tick, whatever the link (continuous mode; a
        round is cut at its end)."""
        self.cut_requested = True

    def _record_ended(self, returncode):
        """perf record ended: its status, and whether the target is why."""
        self.record_status = exit_status(returncode)
        if self.s.pid is not None:
            self.target_exited = self.target is None or has_exited(self.target)

    def _adopt_record(self, rec):
        with self.lock:
            self.record = rec
            if self.stop_requested:  # asked to stop before perf had started
                self._interrupt()

    def _interrupt(self):
        if self.discard:
            for p in (self.record, self.script):
                if p is not None:
                    signal_child(p, signal.SIGKILL)
            return
        if self.record is not None:
            signal_child(self.record, signal.SIGINT)
            self.kill_at = monotonic() + 3.0

    def _watchdog(self):
        """After a stop: perf record has 3 s to flush and exit, perf script (which may take a
        while to name what was recorded: a large binary's symbols on a busy device) 30 s."""
        now = monotonic()
        with self.lock:
            record_due = self.kill_at is not None and now >= self.kill_at
            if record_due:
                self.kill_at = None
                self.script_kill_at = now + 27.0
            script_due = self.script_kill_at is not None and now >= self.script_kill_at
            if script_due:
                self.script_kill_at = None
        if record_due:
            kill_child(self.record)
        if script_due:
            kill_child(self.script)

    def _main(self):
        try:
            if self.s.pid is not None:
                self.target = running_process(self.s.pid)
            if self.s.rounds:
                self._run_rounds()
            else:
                self._run_continuous()
        except Exception as e:  # a bug or a failing compressor: say so, never leave perf
            log("collection failed: %s" % e)
            self.error = self.error or str(e)
        finally:
            for p in (self.stat, self.record, self.script):
                kill_child(p)
            self.chunker.compressor.close()
            if self.on_done is not None:
                self.on_done(self)
            self.done.set()

    def _cannot_run(self, e):
        self.error = "cannot run %s: %s" % (self.perf, os_message(e))

    def _script_args(self, source):
        return script_args(source, self.s.script_fields, self.s.pid is None, self.s.off_cpu)

    def _start_stat(self):
        if self.s.stat_events:
            try:
                self.stat = spawn([self.perf] + stat_args(self.s.stat_events, self.s.pid),
                                  stderr=subprocess.PIPE)
            except OSError:
                self.stat = None

    def _finish_stat(self, restart):
        """The running perf stat's report; with `restart`, the next one's counts start now."""
        p, self.stat = self.stat, None
        if p is None:
            return b""
        if restart:
            self._start_stat()
        signal_child(p, signal.SIGINT)
        try:
            _, err = p.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            signal_child(p, signal.SIGKILL)
            _, err = p.communicate()
        forget_child(p)
        return (err or b"")[:256 << 10]

    def _flush_due(self):
        return self.s.flush_interval > 0 and \
            monotonic() >= self.last_cut + self.s.flush_interval and self.may_flush()

    def _flush(self):
        """What perf script printed so far, without perf stat's report."""
        self.last_cut = monotonic()
        self._send(self.chunker.cut())

    def _send(self, payload):
        if payload is not None:
            self.chunks += 1
            self.on_chunk(payload)

    def _fail_if_empty(self, why):
        if self.chunks == 0 and not self.stop_requested and not self.error:
            cut = why.find("\n", 200)
            self.error = why if cut < 0 else why[:cut]

    def _wait_for(self, *procs):
        give_up = monotonic() + 5.0
        for p in procs:
            while p.poll() is None:
                self._watchdog()
                if monotonic() > give_up:
                    kill_child(p)
                time.sleep(0.05)
            forget_child(p)

    def _run_continuous(self):
        prompt = self.s.prompt and self.s.frequency <= PROMPT_MAX_HZ
        held = self._run_pipeline(prompt)
        if prompt and self.script_bytes == 0 and not self.stop_requested and \
                (self.record_status or 0) > 0 and b"no-buffering" in self.record_err:
            # An old perf that does not know the option: the same run without it (and without
            # the perf stat report of the attempt).
            self.prompt_refused = True
            self.error, self.record_err, self.record_status = "", b"", None
            self._run_pipeline(False)
        else:
            self._send(held)

    def _run_pipeline(self, prompt):
        control = None
        try:
            # Periods asked for (--output): perf record bounds the run itself (its workload
            # sleeps through all of them), so the recording lasts what was asked however long
            # perf takes to start; a SIGINT at the end could reach a perf still starting.
            bound = [sleep_program(), "%f" % (float(self.s.duration) * self.s.periods)] \
                if self.s.periods else None
            # A ladder of rates: perf record listens on a pipe of its own for the one to use
            # (none to be had: one rate).
            if getattr(self.s, "ladder", None) and ladder_possible(self.s):
                try:
                    control = os.pipe()
                except OSError:
                    self.s.ladder = None
            try:
                rec, scr = start_pipeline(
                    self.perf, record_args(self.s, "-", bound, prompt,
                                           control[0] if control else None),
                    self._script_args("-"), (control[0],) if control else ())
            finally:
                if control:
                    os.close(control[0])
        except OSError as e:
            if control:
                os.close(control[1])
            self._cannot_run(e)
            return
        if control:
            self._close_control()
            os.set_blocking(control[1], False)  # (a perf that stopped reading blocks nothing)
            with self.lock:
                self.control, self.rate = control[1], 0
            if not self.set_rate(self.s.frequency):
                self._close_control()
        self.script = scr
        self._adopt_record(rec)
        self._start_stat()
        bufs, keep = bounded_buffers({"rerr": 64 << 10, "serr": 64 << 10})
        # Periods asked for: a perf record that outlives its workload is stopped, drained.
        overdue = monotonic() + float(self.s.duration) * self.s.periods + OVERRUN_GRACE \
            if self.s.periods else None
        state = {"next_cut": monotonic() + self.s.duration, "cut_now": False, "open": True,
                 "periods": 0, "overdue": overdue}

        def on_data(name, data):
            if name != "out":
                keep(name, data)
            elif not data:
                state["open"] = False
            else:
                self.script_bytes += len(data)
                self.chunker.append(data)
                if self.chunker.chunk_bytes >= self.s.chunk_max_text:
                    state["cut_now"] = True

        def tick():
            self._watchdog()
            if state["overdue"] is not None and monotonic() >= state["overdue"]:
                state["overdue"] = None
                self.request_stop(True)
            if not state["open"]:
                return
            now = monotonic()
            if now >= state["next_cut"]:
                # A period is over: its perf stat report goes with what was printed since the
                # last flush (a period overrun starts the next one now).
                state["next_cut"] = max(state["next_cut"] + self.s.duration, now)
                if self.s.periods:
                    state["periods"] += 1
                    if state["periods"] >= self.s.periods:
                        return  # the last period: perf record ends it; the drain's final cut
                self.last_cut = now
                self._send(self.chunker.cut(self._finish_stat(True)))
            elif state["cut_now"] or self.cut_requested or self._flush_due():
                state["cut_now"] = self.cut_requested = False
                self._flush()

        pump({scr.stdout.fileno(): "out", rec.stderr.fileno(): "rerr",
              scr.stderr.fileno(): "serr"}, on_data, tick)
        # perf script has ended: the last chunk, unfinished sample included (held back when
        # a --no-buffering attempt printed no sample: a retry may follow; the unfinished
        # sample dropped when a stop without draining killed perf script).
        last = self.chunker.cut(self._finish_stat(False), not self.discard)
        held = None
        if prompt and self.script_bytes == 0:
            held = last
        else:
            self._send(last)
        for f in (rec.stderr, scr.stdout, scr.stderr):
            f.close()
        self._wait_for(rec, scr)
        self._close_control()
        self._record_ended(rec.returncode)
        self.record_err = bytes(bufs["rerr"])
        self._fail_if_empty(bytes(bufs["rerr"] or bufs["serr"]).decode("utf-8", "replace"))
        return held

    def _run_rounds(self):
        # `perf record -o roundN.data -- sleep D` back to back; round N's perf script runs
        # while round N+1 records, so only process start-up separates rounds.
        folder = tempfile.mkdtemp(prefix="perfwire-rounds-", dir="/tmp")
        bound = [sleep_program(), "%f" % float(self.s.duration)]
        previous, previous_stat, record_err = None, b"", b""
        try:
            for n in range(1 << 30):
                path = "%s/round%d.data" % (folder, n)
                try:
                    rec = spawn([self.perf] + record_args(self.s, path, bound),
                                stderr=subprocess.PIPE)
                except OSError as e:
                    self._cannot_run(e)
                    break
                self._adopt_record(rec)
                self._start_stat()
                started = monotonic()
                # A perf that outlives the round's workload (one that ignores `-- sleep`):
                # SIGINT once overdue, SIGKILL 3 s later.
                overrun = threading.Timer(float(self.s.duration) + OVERRUN_GRACE, stop_child,
                                          (rec, 3.0))
                overrun.daemon = True
                overrun.start()
                err_box = []
                drain = threading.Thread(target=lambda: err_box.append(rec.stderr.read()))
                drain.start()
                if previous:
                    self._script_round(previous, previous_stat)
                drain.join()
                rec.stderr.close()
                self._wait_for(rec)
                overrun.cancel()
                record_err = (err_box[0] if err_box else b"")[:64 << 10]
                self._record_ended(rec.returncode)
                self.record_err = record_err
                previous, previous_stat = path, self._finish_stat(False)
                if self.stop_requested or self.target_exited or \
                        (self.s.periods and n + 1 >= self.s.periods):
                    break  # stopped, the target went away, or the rounds asked for are done
                left = started + self.s.duration - monotonic()
                if left > 0.2:
                    # perf ended the round early: a failure ends the run; a clean exit while
                    # the target runs (a perf that stops on its own) does not, but the next
                    # round starts only when this one should have ended, so such a perf
                    # cannot make the agent spin.
                    if self.record_status != 0:
                        break
                    self.gap.wait(left)
                    if self.stop_requested:
                        break
            if previous and not self.discard:
                self._script_round(previous, previous_stat)
            self._fail_if_empty(record_err.decode("utf-8", "replace"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _script_round(self, path, stat_text):
        try:
            self.script = scr = spawn([self.perf] + self._script_args(path),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError:
            self.script = scr = None
        if scr is not None:
            def on_data(name, data):
                if name == "out" and data:
                    self.script_bytes += len(data)
                    self.chunker.append(data)
                    if self.chunker.chunk_bytes >= self.s.chunk_max_text:
                        self._flush()  # a huge round: send it in parts
                    elif self._flush_due():
                        self._flush()  # a round's samples as perf script names them
            pump({scr.stdout.fileno(): "out", scr.stderr.fileno(): "err"}, on_data,
                 self._watchdog)
            scr.stdout.close()
            scr.stderr.close()
            self._wait_for(scr)
        self.last_cut = monotonic()
        self._send(self.chunker.cut(stat_text, not self.discard))
        try:
            os.remove(path)
        except OSError:
            pass


# ================================================================================ session

MAX_QUEUED_BYTES = 64 << 20
MAX_BACKLOG_FOR_READING = 1 << 20  # of answers: past it no more commands are read
AUTH_TIMEOUT = 10.0  # the collector sends the code right after the hello
MAX_AUTH_FAILURES = 3
MAX_UNAUTHENTICATED_COMMANDS = 3
MIN_CODE_BITS = 40
CODE_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"  # 32, no 0/o or 1/l: 5 bits each


def generate_typeable_code():
    """16 characters in groups of four ("k7mq-x3vd-9hwt-pe2c"), 80 bits: easy to read off one
    screen and type on another, perhaps over a serial console."""
    chars = [CODE_ALPHABET[b & 31] for b in bytearray(os.urandom(16))]
    return "-".join("".join(chars[i:i + 4]) for i in range(0, 16, 4))


def normalize_code(code):
    """Codes compare without case, dashes and spaces."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in code if c not in "- ")


def code_matches(expected, presented):
    return hmac.compare_digest(normalize_code(expected).encode("utf-8"),
                               normalize_code(presented).encode("utf-8"))


def code_strength_bits(code):
    """Roughly how many bits a guesser must search: length x bits of the classes used."""
    c = normalize_code(code)
    lower = any("a" <= ch <= "z" for ch in c)
    digit = any("0" <= ch <= "9" for ch in c)
    other = any(not ("a" <= ch <= "z" or "0" <= ch <= "9") for ch in c)
    alphabet = (26 if lower else 0) + (10 if digit else 0) + (32 if other else 0)
    return len(c) * math.log(alphabet, 2) if alphabet > 1 else 0.0


class PairingGuard(object):
    """Failed pairing attempts across every connection: after each, the next attempt (on any
    connection) is answered only after a wait that doubles, 0.1 s up to 10 s; a success, or
    5 minutes without a failure, resets it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.failures, self.next_attempt, self.last_failure = 0, 0.0, 0.0

    def wait_turn(self, session):
        with self.lock:
            if self.failures and monotonic() - self.last_failure > 300:
                self.failures = 0  # forgotten after 5 minutes without one
            wait = self.next_attempt - monotonic()
        if wait > 0:
            time.sleep(wait)  # the reader waits: this connection can do nothing meanwhile

    def failed(self):
        with self.lock:
            self.failures += 1
            delay = min(0.1 * (1 << min(self.failures - 1, 16)), 10.0)  # under the collector's wait
            self.last_failure = monotonic()
            self.next_attempt = self.last_failure + delay
            return self.failures, delay

    def succeeded(self):
        with self.lock:
            self.failures = 0


def update_signed_text(offer):
    """What an offer's Ed25519 signature is made over (protocol/update.hpp): every field that
    decides what would run."""
    return "perfwire-agent-update-v2\narch=%s\nversion=%s\nsize=%d\nsha256=%s\n" % (
        offer["arch"], offer["version"], offer["size"], offer["sha256"])


# ---- Ed25519 signature checks (RFC 8032, section 5.1.7), in Python's own integers: the
# standard library has none, and a device's Python has no third-party modules. Only public
# data goes through it (a key, a message and a signature), so its timing reveals nothing.
ED_P = 2 ** 255 - 19
ED_L = 2 ** 252 + 27742317777372353535851937790883648493
ED_D = -121665 * pow(121666, ED_P - 2, ED_P) % ED_P
ED_SQRT_M1 = pow(2, (ED_P - 1) // 4, ED_P)


def ed_add(a, b):
    """Sum of two points in extended coordinates (X, Y, Z, T)."""
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    p = ED_P
    ra, rb = (y1 - x1) * (y2 - x2) % p, (y1 + x1) * (y2 + x2) % p
    rc, rd = 2 * t1 * t2 * ED_D % p, 2 * z1 * z2 % p
    e, f, g, h = rb - ra, rd - rc, rd + rc, rb + ra
    return (e * f % p, g * h % p, f * g % p, e * h % p)


def ed_multiply(k, point):
    result = (0, 1, 1, 0)  # the neutral element
    while k:
        if k & 1:
            result = ed_add(result, point)
        point = ed_add(point, point)
        k >>= 1
    return result


def ed_decode(raw):
    """The point 32 bytes encode, or None when they encode none."""
    if len(raw) != 32:
        return None
    y = int(binascii.hexlify(raw[::-1]), 16)
    sign, y = y >> 255, y & ((1 << 255) - 1)
    if y >= ED_P:
        return None
    u, v = (y * y - 1) % ED_P, (ED_D * y * y + 1) % ED_P
    x = u * pow(v, 3, ED_P) * pow(u * pow(v, 7, ED_P), (ED_P - 5) // 8, ED_P) % ED_P
    if v * x * x % ED_P == (-u) % ED_P:
        x = x * ED_SQRT_M1 % ED_P
    elif v * x * x % ED_P != u:
        return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = ED_P - x
    return (x, y, 1, x * y % ED_P)


ED_BASE = ed_decode(binascii.unhexlify(
    "5866666666666666666666666666666666666666666666666666666666666666"))


def ed25519_verify(public, message, signature):
    """Whether `signature` (64 bytes) is the key `public` (32 bytes) signing `message`:
    [S]B = R + [k]A, with S < L (no signature has two forms) and k = SHA-512(R || A || M)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    a, r = ed_decode(public), ed_decode(signature[:32])
    s = int(binascii.hexlify(signature[32:][::-1]), 16)
    if a is None or r is None or s >= ED_L:
        return False
    k = int(binascii.hexlify(hashlib.sha512(signature[:32] + public + message).digest()[::-1]),
            16) % ED_L
    left, right = ed_multiply(s, ED_BASE), ed_add(r, ed_multiply(k, a))
    return ((left[0] * right[2] - right[0] * left[2]) % ED_P == 0 and
            (left[1] * right[2] - right[1] * left[2]) % ED_P == 0)


# The y of the Ed25519 points of small order (little-endian, the sign bit cleared): 0, 1,
# the two of order 8, p - 1, and p and p + 1 (0 and 1 unreduced). A signature made without
# any private key verifies under such a key (protocol/tls.cpp, small_order).
SMALL_ORDER_Y = [binascii.unhexlify(h) for h in (
    "00" * 32, "01" + "00" * 31,
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "ec" + "ff" * 30 + "7f", "ed" + "ff" * 30 + "7f", "ee" + "ff" * 30 + "7f")]


def public_key_bytes(text):
    """The 32 bytes of "ed25519:<base64>" as the collector prints it; None otherwise."""
    text = text.strip()
    if not text.startswith("ed25519:"):
        return None
    try:
        raw = binascii.a2b_base64(text[len("ed25519:"):].encode("ascii"))
    except (binascii.Error, ValueError, UnicodeError):
        return None
    if len(raw) != 32 or binascii.b2a_base64(raw).strip().decode("ascii") != text[8:]:
        return None
    return raw


def weak_public_key(text):
    """Whether `text` is an Ed25519 key of small order, in any encoding."""
    raw = public_key_bytes(text)
    return raw is not None and raw[:31] + bytes([raw[31] & 0x7f]) in SMALL_ORDER_Y


def parse_public_key(text):
    """The 32 bytes of an update key as the collector prints it; None otherwise, and for a
    weak key."""
    if weak_public_key(text):
        return None
    return public_key_bytes(text)


def later_version(candidate, current):
    """Whether `candidate` is a later version than `current`, as protocol/update.cpp judges
    it: dotted parts in turn, as numbers when both are, else as text; a missing part counts
    as 0."""
    if not candidate:
        return False
    a, b = candidate, current or ""

    def number(p):
        p = p or "0"
        return int(p) if len(p) <= 18 and re.match(r"[0-9]+\Z", p) else None
    while a or b:
        x, _, a = a.partition(".")
        y, _, b = b.partition(".")
        nx, ny = number(x), number(y)
        if nx is not None and ny is not None:
            if nx != ny:
                return nx > ny
        elif x != y:
            return x > y
    return False


# What may be offered as an update: dotted numbers, nothing that compares as text
# (protocol/update.hpp, update_version).
UPDATE_VERSION = re.compile(r"[0-9]{1,18}(\.[0-9]{1,18})*\Z")


HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def parse_pin(text):
    """A pin as typed: "sha256:" and 64 hex digits, any case, colons allowed; normalised."""
    if text[:7].lower() != "sha256:":
        return None
    digits = text[7:].replace(":", "").lower()
    return "sha256:" + digits if re.match(r"[0-9a-f]{64}\Z", digits) else None


def check_offer(offer, public_key, pinned, running):
    """Why an update offer is refused ("" if it is not): as the C++ agent judges it. Taken
    only when signed (Ed25519) by the key of --update-pubkey over architecture, version, size
    and sha256 or, without one, over a TLS link to a collector this agent pinned; and later
    than `running`; all before a byte of it is run."""
    if public_key is None and not pinned:
        return ("refused: this agent takes updates signed for its --update-pubkey (the key "
                "perfwire-collector --agent-update-key prints), or over a TLS link to a "
                "collector it pinned (--tls-pin); it has neither")
    if offer["arch"] != "python":
        return ("wrong architecture: this agent is built for python, the offered build for "
                + offer["arch"])
    if not HEX64.match(offer["sha256"]):
        return "sha256 must be 64 lowercase hex characters"
    if not 0 < offer["size"] <= MAX_UPDATE_SIZE:
        return "size must be 1 to %d bytes" % MAX_UPDATE_SIZE
    if len(offer["version"]) > 64 or not UPDATE_VERSION.match(offer["version"]):
        return ("version must be dotted numbers (1 to 64 characters, each number at most 18 "
                "digits)")
    if public_key is not None and not offer["signature"]:
        return ("this agent takes only signed updates (--update-pubkey): the offer has no "
                "signature")
    if public_key is not None:
        try:
            signature = binascii.a2b_base64(offer["signature"].encode("ascii"))
        except (binascii.Error, ValueError, UnicodeError):
            signature = b""
        if not ed25519_verify(public_key, update_signed_text(offer).encode("ascii"),
                              signature):
            return ("bad signature: the offer (architecture, version, size, sha256) is not "
                    "signed by the key of this agent's --update-pubkey")
    if not later_version(offer["version"], running):
        return "refused: version %s is not later than this agent's %s" % (offer["version"],
                                                                          running)
    return ""


def strict_base64(text):
    """The bytes of canonical padded base64, or None."""
    if len(text) % 4 or not re.match(r"[A-Za-z0-9+/]*={0,2}$", text):
        return None
    try:
        raw = binascii.a2b_base64(text.encode("ascii"))
    except (binascii.Error, ValueError):
        return None
    return raw if binascii.b2a_base64(raw).rstrip(b"\n") == text.encode("ascii") else None


class UpdateReceiver(object):
    """A build received over the link into a file beside this script (update, update_data,
    update_apply); dropped before install(), it removes its file."""

    offers = 0

    def __init__(self, offer):
        self.offer = offer
        # Beside the script, under a name of its own; files of earlier offers go (one that
        # died midway, or one still under way, which then fails to rename).
        folder, prefix = os.path.dirname(SELF), "." + os.path.basename(SELF) + ".update-"
        for name in os.listdir(folder):
            if name.startswith(prefix):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
        UpdateReceiver.offers += 1
        self.path = os.path.join(folder, "%s%d-%d" % (prefix, os.getpid(), UpdateReceiver.offers))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC |
                          getattr(os, "O_NOFOLLOW", 0), 0o700)
        self.hash, self.received, self.installed = hashlib.sha256(), 0, False

    def drop(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if not self.installed:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def write(self, offset, data):
        if self.fd is None:
            return "the update is already complete"
        if offset != self.received:
            return "expected the piece at offset %d, got %d" % (self.received, offset)
        if len(data) > self.offer["size"] - self.received:
            return "more bytes than the offered %d" % self.offer["size"]
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as e:
            return "cannot write %s: %s" % (self.path, os_message(e))
        self.hash.update(data)
        self.received += len(data)
        return ""

    def finish(self):
        if self.received != self.offer["size"]:
            return "received %d of %d bytes" % (self.received, self.offer["size"])
        digest = self.hash.hexdigest()
        if not hmac.compare_digest(self.offer["sha256"], digest):
            return "checksum mismatch: the offer says sha256 %s, the bytes are %s" % (
                self.offer["sha256"], digest)
        try:
            os.fsync(self.fd)
            os.fchmod(self.fd, 0o755)
        except OSError as e:
            return "cannot finish %s: %s" % (self.path, os_message(e))
        os.close(self.fd)
        self.fd = None
        return ""

    def install(self):
        try:
            os.rename(self.path, SELF)
        except OSError as e:
            return "cannot replace %s: %s" % (SELF, os_message(e))
        self.installed = True
        try:  # the rename is durable once the folder is
            folder = os.open(os.path.dirname(SELF), os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except OSError:
            pass
        return ""


class Outbox(object):
    """The run's chunks the collector has not confirmed it stored, in the order they were made
    (docs/protocol.md, "Runs"): each of a run and numbered in it from 1, sent by position, the
    oldest dropped (and counted) past `cap` bytes. Memory only: the C++ agent also spools to
    disk."""

    def __init__(self, cap):
        self.cap, self.lock = cap, threading.Lock()
        self.held = collections.deque()  # [pos, run, seq, chunk, bytes_before]
        self.next_pos, self.last_run, self.last_seq = 1, "", 0
        self.bytes = self.added = self.dropped_chunks = self.dropped_bytes = 0

    def add(self, run, chunk):
        with self.lock:
            self.last_seq = self.last_seq + 1 if run == self.last_run else 1
            self.last_run = run
            self.held.append([self.next_pos, run, self.last_seq, chunk, self.added])
            self.next_pos += 1
            self.added += len(chunk)
            self.bytes += len(chunk)
            while self.bytes > self.cap and len(self.held) > 1:
                gone = self.held.popleft()
                self.bytes -= len(gone[3])
                self.dropped_chunks += 1
                self.dropped_bytes += len(gone[3])
            return self.last_seq

    def stored(self, run, seq):
        """`run` is stored up to `seq`: those chunks, and older runs' before them, go. Returns
        the position just before what is still to send."""
        with self.lock:
            if any(h[1] == run for h in self.held):
                reached = False
                while self.held:
                    first = self.held[0]
                    if first[1] != run and reached:
                        break
                    if first[1] == run:
                        reached = True
                        if first[2] > seq:
                            break
                    self.held.popleft()
                    self.bytes -= len(first[3])
            return self.held[0][0] - 1 if self.held else self.next_pos - 1

    def after(self, pos):
        with self.lock:
            if not self.held or pos >= self.held[-1][0]:
                return None
            if pos < self.held[0][0]:
                return self.held[0]
            return self.held[pos + 1 - self.held[0][0]]

    def bytes_after(self, pos):
        nxt = self.after(pos)
        return self.added - nxt[4] if nxt is not None else 0

    def front(self):
        with self.lock:
            return self.held[0] if self.held else None

    def last_pos(self):
        return self.next_pos - 1


class Run(object):
    """What the agent profiles, owned by the agent, not by a connection, so it outlives one
    (run.hpp in the C++ agent): perf keeps recording while no link is attached, its chunks kept
    in the outbox; it ends as before, and after --offline-max without a link."""

    def __init__(self, cfg):
        self.lock = threading.RLock()
        self.state, self.current, self.lost_samples, self.id = "idle", None, 0, ""
        self.settings = Settings(cfg.frequency, cfg.pid, cfg.duration)
        self.settings.off_cpu = cfg.off_cpu
        self.settings.off_cpu_min_us = cfg.off_cpu_min_us
        self.outbox = Outbox(cfg.buffer_mb << 20)
        self.offline_max = cfg.offline_max
        self.owner = None  # the session attached
        self.ended_offline = None  # why it ended while no link was there
        self.offline_timer, self.offline_expired = None, False
        self.flight_asked = flight_asked(cfg)  # for the next run (None: not a flight recorder)
        self.flight = None  # the run under way's FlightState, if it is a flight recorder
        # The last captures: told again to a link that comes back (capture_notes in run.hpp).
        self.capture_notes = collections.deque(maxlen=16)  # [run, trigger, at, window_s, last]
        # --max-overhead: the budget for the next run (0 none), the run's governor and meter.
        self.overhead_asked = getattr(cfg, "max_overhead", 0.0)
        self.governor, self.meter, self.watcher = None, CostMeter(), None
        # Held across a collection's end and the next one's start (stop, pause, resume,
        # configure, start, a rate change), so two of them never interleave.
        self.control = threading.Lock()

    def effective(self):
        """The settings a collection runs with: the run's, at the governor's rate."""
        g = self.governor
        return self.settings if g is None else g.effective(self.settings)

    def capture_ended(self):
        """A run that ends while a capture is under way: its last chunk is the capture's."""
        n = self.capture_notes[-1] if self.capture_notes else None
        if n is not None and n[0] == self.id and n[4] is None:
            box = self.outbox
            n[4] = box.last_seq if box.last_run == self.id else 0

    def state_name(self):
        """What the run is doing, as the collector is told: a flight recorder between captures
        is armed."""
        f = self.flight
        return "armed" if self.state == "profiling" and f is not None and f.holding() \
            else self.state

    def add(self, payload):
        with self.lock:
            f = self.flight
            if f is not None and f.holding():  # armed: the chunks stay on the device
                was_whole = f.ring.dropped_for_room == 0
                f.ring.add(monotonic(), payload)
                if was_whole and f.ring.dropped_for_room:
                    # Said once, in the log and to the collector: never a shorter window in
                    # silence.
                    what = ("flight recorder: its %d MiB hold only %.0f s of the %d s asked "
                            "(--flight-memory-mb, or a shorter --flight-recorder)"
                            % (f.settings["memory_bytes"] >> 20, f.ring.held_span(),
                               f.settings["window"]))
                    log(what)
                    if self.owner is not None:
                        self.owner.send_flight(what, "", 0, 0)
                return
            self.outbox.add(self.id, payload)
            owner = self.owner
            if owner is not None:
                owner.wake_writer()
            if f is not None and f.draining is not None:  # the capture's last chunk
                self.armed_again(f)

    def may_flush(self):
        # (A flight recorder's window takes its chunks whatever the link.)
        f, owner = self.flight, self.owner
        return (f is not None and f.holding()) or (owner is not None and owner.link_has_room())

    # ---- flight recorder

    def begin_flight(self):
        """A new run: a flight recorder's window and watch, when one is asked for."""
        self.flight = None
        if self.flight_asked is not None:
            FLIGHT_SIGNALLED.clear()  # (one from before this run asks nothing of it)
            self.flight = FlightState(self.flight_asked, self.settings.pid)
            start_thread(self._flight_loop, "flight", (self.flight,))

    def fire(self, f, what):
        """A trigger fired: a capture begins (the window held goes out first, as a run of its
        own), or the one under way grows, or it is refused (too soon after the last)."""
        with self.lock:
            now = monotonic()
            answer = f.plan.fire(now, what)
            if answer == "refused":
                if not f.refusing:
                    f.refusing = True
                    log("flight recorder: %s: not captured (the last capture began under %d s "
                        "ago)" % (what, f.plan.min_gap))
                return answer
            if answer == "extended":
                if f.plan.fired <= CapturePlan.MAX_FIRES:
                    log("flight recorder: %s: the capture under way goes on" % what)
                return answer
            f.refusing, f.draining = False, None
            f.captures += 1
            self.id = os.urandom(16).hex()
            window_s = f.ring.span_to(now)  # the moment falls this far into the session
            window = f.ring.take()
            log("flight recorder: %s: capture %d (run %s), %d chunks held before it"
                % (what, f.captures, self.id, len(window)))
            at = time.time()
            self.capture_notes.append([self.id, what, at, window_s, None])
            owner = self.owner
            if owner is not None:  # said before the window, which follows it
                owner.send_flight("flight recorder: " + what, what, at, window_s)
            for chunk in window:
                self.outbox.add(self.id, chunk)
            if owner is not None:
                owner.wake_writer()
            return answer

    def armed_again(self, f):
        """A capture's last chunk came (or there was none to cut): the ring holds from now."""
        with self.lock:
            f.draining = None
            if self.capture_notes and self.capture_notes[-1][0] == self.id:
                box = self.outbox
                self.capture_notes[-1][4] = box.last_seq if box.last_run == self.id else 0
            f.ring.restart(monotonic())
            log("flight recorder: capture %d over; holding the last %d s again"
                % (f.captures, f.settings["window"]))
            owner = self.owner
            if owner is not None:
                owner.send_flight("flight recorder: capture over; holding the last %d s"
                                  % f.settings["window"], "", 0, 0)

    def _flight_loop(self, f):
        """Four times a second for as long as the run: the triggers, and a capture's end."""
        while True:
            time.sleep(0.25)
            with self.lock:
                if self.flight is not f or self.state == "idle":
                    return
                if self.state != "profiling":
                    continue  # paused: no trigger fires, no capture ends
            fired, holding = f.watch.poll(monotonic())
            for what in fired:
                if self.fire(f, what) == "refused":
                    f.watch.refused()  # (tried again while a level stays above)
            if FLIGHT_SIGNALLED.is_set():
                FLIGHT_SIGNALLED.clear()
                self.fire(f, "SIGUSR1")
            with self.lock:
                if holding:
                    f.plan.extend(monotonic())  # a spike lasts: so does its capture
                now = monotonic()
                if f.plan.over(now):
                    # The chunk being made is the capture's: cut it now, whatever the link.
                    f.draining = now
                    if self.current is not None:
                        self.current.request_cut()
                elif f.draining is not None and now - f.draining >= 0.5:
                    self.armed_again(f)  # nothing was left to cut

    def collection_done(self, c):
        if c.chunker.folder:
            log("[run %s] %s" % (self.id, c.chunker.folder.summary()))
        with self.lock:
            self.lost_samples += c.lost_samples
            if c.prompt_refused:
                self.settings.prompt = False
            if self.current is not c:
                return
            self.current = None
            expired, self.offline_expired = self.offline_expired, False
            if (c.stop_requested and not expired) or self.state != "profiling":
                return
            # perf ended on its own (the target exited, or perf failed), or no link came back.
            self.state = "idle"
            self.capture_ended()
            pid = self.settings.pid
            if expired:
                reason = "no link to the collector for %d s (--offline-max)" % self.offline_max
            elif c.error and c.chunks == 0:
                reason = "perf failed: " + c.error
            elif c.target_exited:
                reason = "target process exited"
            elif c.record_status is not None and c.record_status > 0:
                reason = "perf record exited with status %d" % c.record_status
                why = perf_complaint(c.record_err.decode("utf-8", "replace"))
                if why:
                    reason += ": " + why
            elif c.record_status == 0:
                reason = "perf record ended by itself (exit status 0)" + (
                    "" if pid is None else " while process %d still runs" % pid)
            else:
                reason = "perf exited"
            f = self.flight
            if f is not None and f.holding() and not expired and f.ring.held:
                # A flight recorder's run that ends by itself sends what it held: the moments
                # before are what it is for.
                self.state = "profiling"
                self.fire(f, "the run ended: " + reason)
                self.state = "idle"
            owner = self.owner
            if owner is None:
                self.ended_offline = reason
        if owner is not None:
            owner.log(reason + "; idle")
            owner.send_state(reason)

    def detached(self):
        """No link: the run ends after --offline-max unless one comes back (a flight recorder
        holding its window needs no link: it ends only when asked)."""
        if self.offline_timer is not None:
            self.offline_timer.cancel()
        if self.flight is not None and self.flight.holding():
            return
        self.offline_timer = threading.Timer(self.offline_max, self._offline_too_long)
        self.offline_timer.daemon = True
        self.offline_timer.start()

    def _offline_too_long(self):
        with self.lock:
            if self.owner is not None:
                return
            log("no link to the collector for %d s (--offline-max): the run ends"
                % self.offline_max)
            if self.current is not None:
                self.offline_expired = True
                self.current.request_stop()
            elif self.state != "idle":  # paused
                self.state = "idle"
                self.ended_offline = ("no link to the collector for %d s (--offline-max)"
                                      % self.offline_max)


def flight_asked(cfg):
    """A flight recorder's settings from the command line; None when it is not one."""
    if not getattr(cfg, "flight_recorder", 0):
        return None
    return flight_of_config(cfg)


def flight_of_config(cfg):
    return {"window": getattr(cfg, "flight_recorder", 0), "after": getattr(cfg, "after", 10),
            "memory_bytes": getattr(cfg, "flight_memory_mb", 16) << 20,
            "triggers": dict(getattr(cfg, "triggers", {})), "min_gap": 60.0}


def flight_of_start(args, cfg, has_pid):
    """A start's flight recorder over the command line's (flight_of_start in the C++ agent):
    (settings or None, "") or (None, why not). A log or file to watch is the device owner's to
    name, never a request's."""
    for key in ("trigger_log", "trigger_file"):
        if key in args:
            return None, ("%s: a log or file to watch is the device owner's to name (the "
                          "agent's --trigger-log and --trigger-file), not a start's" % key)
    f = flight_of_config(cfg)
    window = int_arg(args, "flight_recorder", 0, 3600)
    after = int_arg(args, "after", 0, 3600)
    memory = int_arg(args, "flight_memory_mb", 1, 1024)
    asked = after is not None or memory is not None
    if window is not None:
        f["window"] = window
    if after is not None:
        f["after"] = after
    if memory is not None:
        f["memory_bytes"] = memory << 20
    for key in ("cpu", "memory", "load", "process"):
        v = args.get("trigger_" + key)
        if v is not None:
            if not isinstance(v, str):
                return None, "trigger_%s must be a string (\"\": none)" % key
            f["triggers"][key] = v
            asked = True
    if not f["window"]:
        if asked:
            return None, "after, flight_memory_mb and the triggers go with flight_recorder"
        return None, ""
    why = check_triggers(f["triggers"], has_pid)
    if why:
        return None, why
    if f["memory_bytes"] > cfg.buffer_mb << 20:
        return None, ("flight_memory_mb past the agent's --buffer-mb (%d): a capture's window "
                      "would not fit where the link sends it from" % cfg.buffer_mb)
    return f, ""


def _run_property(name):
    return property(lambda self: getattr(self.profiling_run, name),
                    lambda self, value: setattr(self.profiling_run, name, value))


class Session(object):
    """One collector connection.

    reader (this thread)  <- commands (flag 2), handled one at a time
    writer thread         -> hello, responses, state (3), data (0/1), metrics (4) from one
                             byte-capped queue
    metrics thread        -> health metrics every interval once authenticated
    collection thread     -> chunks
    Closing (EOF, error, lockout, shutdown) stops the collection so no perf outlives it,
    unless the collector resumes runs: then the run goes on without the link (Run)."""

    # The run's, whichever connection sends it.
    state = _run_property("state")
    settings = _run_property("settings")
    current = _run_property("current")
    lost_samples = _run_property("lost_samples")

    def __init__(self, sock, cfg, token, compression, on_authenticated=None, guard=None,
                 run=None):
        self.sock, self.cfg, self.compression = sock, cfg, compression
        self.profiling_run = run if run is not None else Run(cfg)
        # How the run's chunks go on this link: as flag 1 until the collector asks `sequence`
        # (an older one never does), held while a run waits for it to say what it has, then
        # numbered (flag 5).
        self.data_mode, self.sent_pos, self.legacy_run, self.legacy_seq = "legacy", 0, "", 0
        self.legacy_timer = None
        self.token = token  # None: starts authenticated
        self.on_authenticated = on_authenticated
        self.guard = guard or PairingGuard()
        self.unauthenticated_commands = self.reply_bytes = 0
        self.settled = threading.Event()  # authenticated or closed: the listener takes the next
        try:
            address = sock.getpeername()
        except OSError:
            address = None
        self.peer = "%s:%d" % address[:2] if isinstance(address, tuple) else "unknown"
        for level, option in ((socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                              (socket.IPPROTO_TCP, socket.TCP_NODELAY)):
            try:
                sock.setsockopt(level, option, 1)
            except OSError:
                pass
        self.authenticated = self.ever_authenticated = token is None
        self.auth_failures = self.queued_bytes = self.dropped_chunks = 0
        self.closed = False
        self.queue = collections.deque()
        self.cond = threading.Condition()
        self.lock = self.profiling_run.lock  # profiling state
        self.caps = self.probed_pid = self.auth_timer = None
        self.platform = {}
        self.probing = False  # a probe under way (status says so; a start waits for it)
        self.probe_cond = threading.Condition()
        self.sampler = MetricsSampler()
        self.metrics = {"enabled": True, "network": True, "disk": False, "threads": False}
        self.metrics_interval = 2.0
        self.metrics_wake, self.finished = threading.Event(), threading.Event()
        self.update, self.restart_after_answer = None, False
        # The update under way: this session's reader uses it, and close() may drop it from
        # another thread (a collector that takes over): never while a piece is written.
        self.update_lock = threading.Lock()

    def log(self, what):
        log("[%s] %s" % (self.peer, what))

    # ---- sending

    def send(self, flag, payload, droppable=False, ordered=False):
        """`ordered`: sent only after the run's chunks made before it (a state notice, the
        answer to a command that changes the run)."""
        with self.cond:
            if self.closed:
                return
            if droppable and self.queued_bytes + len(payload) > MAX_QUEUED_BYTES:
                self.dropped_chunks += 1  # the collector is not keeping up; control flows on
                return
            # A big payload is queued as is, beside its header: no second copy of a chunk.
            header = HEADER.pack(len(payload), flag)
            parts = (header + payload,) if len(payload) < 65536 else (header, payload)
            self.queue.append((self.profiling_run.outbox.last_pos() if ordered else 0, parts))
            self.queued_bytes += HEADER.size + len(payload)
            if flag == FLAG_RESPONSE:
                self.reply_bytes += HEADER.size + len(payload)
            self.cond.notify_all()

    def send_json(self, value, flag=FLAG_RESPONSE, droppable=False, ordered=False):
        self.send(flag, to_json(value), droppable, ordered)

    def state_now(self, reason):
        """The state notice of the run as it is now."""
        notice = {"type": "state", "state": self.profiling_run.state_name(), "reason": reason}
        if self.settings.pid is not None:
            notice["pid"] = self.settings.pid
        notice["lost_samples"] = self.lost_samples
        if self.state != "idle":
            now = self.profiling_run.effective()
            notice["callgraph"] = now.callgraph or "none"
            notice["run"] = self.profiling_run.id
            notice["frequency"] = now.frequency
        return notice

    def send_state(self, reason):
        self.send_json(self.state_now(reason), ordered=True)

    def send_flight(self, reason, capture, at, window_s):
        """A flight recorder's capture begins (what fired, when, the window's seconds) or is
        over (`capture` empty): after the chunks made before it."""
        notice = self.state_now(reason)
        if capture:
            notice.update(capture=capture, capture_at=at, capture_window=window_s)
        self.send_json(notice, ordered=True)

    def wake_writer(self):
        with self.cond:
            self.cond.notify_all()

    def _data_flows(self):
        return self.authenticated and self.data_mode != "held"

    def link_has_room(self):
        """The link has taken the run's data sent before: a flush may go."""
        with self.cond:
            return self._data_flows() and \
                self.profiling_run.outbox.bytes_after(self.sent_pos) <= FLUSH_BACKLOG

    def _writer(self):
        # Answers and notices in the order queued; the run's chunks in theirs, from the
        # outbox; a notice or answer that changes the run only after the chunks made before it.
        while True:
            with self.cond:
                while True:
                    if self.closed:
                        return
                    box = self.profiling_run.outbox
                    nxt = box.after(self.sent_pos) if self._data_flows() else None
                    # (An ordered one waits for chunks held back too, until they may flow.)
                    front_due = bool(self.queue) and (self.queue[0][0] <= self.sent_pos or
                                                      box.after(self.sent_pos) is None)
                    if front_due or nxt is not None:
                        break
                    self.cond.wait()
                if front_due:
                    frame = self.queue[0][1]
                else:
                    pos, run, seq, chunk = nxt[0], nxt[1], nxt[2], nxt[3]
                    if self.data_mode == "sequenced":
                        head = bytes.fromhex(run) + struct.pack(">Q", seq)
                        frame = (HEADER.pack(len(head) + len(chunk), FLAG_SEQUENCED) + head,
                                 chunk)
                    else:
                        frame = (HEADER.pack(len(chunk), self.compression.flag), chunk)
            try:
                for part in frame:
                    self.sock.sendall(part)
            except OSError:
                self.close()
                return
            with self.cond:
                if front_due:
                    self.queue.popleft()
                    self.queued_bytes -= sum(len(part) for part in frame)
                    if bytearray(frame[0][4:5]) == bytearray([FLAG_RESPONSE]):
                        self.reply_bytes -= sum(len(part) for part in frame)
                else:
                    self.sent_pos = max(self.sent_pos, pos)
                    if self.data_mode == "legacy":  # nobody will ask for it again
                        self.profiling_run.outbox.stored(run, seq)
                        self.legacy_run, self.legacy_seq = run, seq
                self.cond.notify_all()

    # ---- life cycle

    def run(self):
        try:
            self._run()
        finally:
            self.close()  # whatever happened: settled, so the listener takes the next one
            self.finished.set()

    def _run(self):
        platform_info = {"arch": build_arch(), "machine": os.uname()[4]}
        kernel = read_text("/proc/sys/kernel/osrelease")
        if kernel is not None:
            platform_info["kernel"] = kernel.split("\n")[0][:200]
        version = perf_version_line(run_command([self.cfg.perf, "--version"], 3.0)["out"])
        if version:
            platform_info["perf_version"] = version
        platform_info["perf_event_paranoid"] = read_perf_event_paranoid()
        self.platform = platform_info
        hello = {"type": "hello", "version": PROTOCOL_VERSION, "agent": "perfwire",
                 "agent_version": VERSION, "update_arch": "python",
                 "updates": self.update_policy(),
                 "auth": "none" if self.token is None else "token",
                 "hostname": self.cfg.name or socket.gethostname(),
                 "platform": platform_info}
        if self.cfg.mode == "server" and self.cfg.enroll:
            hello["enrollment"] = self.cfg.enroll  # only to the collector it was told to dial
        if self.cfg.mode == "server" and isinstance(self.sock, TlsLink):
            hello["tls_check"] = self.cfg.tls_pin or "ca"
        # A run outlives its link when the collector resumes runs (numbered chunks are zstd).
        run, box = self.profiling_run, self.profiling_run.outbox
        if self.compression.flag == FLAG_ZSTD:
            hello["resumable"] = True
            first = box.front()
            named = None
            if first is not None:
                named = {"id": first[1], "seq": box.last_seq if box.last_run == first[1]
                         else first[2]}
            elif run.id and run.state != "idle":
                named = {"id": run.id, "seq": box.last_seq}
            if named is not None:
                named["offline_max"] = run.offline_max
                hello["run"] = named
                self.data_mode = "held"  # until the collector says which chunks it has
        with self.cond:
            first = box.front()
            self.sent_pos = first[0] - 1 if first is not None else box.last_pos()
        self.send_json(hello)
        self.log("connected" + ("" if self.token is None else ", waiting for the pairing code"))
        threads = [start_thread(self._writer, "writer"),
                   start_thread(self._metrics_loop, "metrics")]
        if not self.authenticated:
            self.auth_timer = threading.Timer(AUTH_TIMEOUT, self._auth_expired)
            self.auth_timer.daemon = True
            self.auth_timer.start()
        if self.data_mode == "held":
            self.legacy_timer = threading.Timer(0.0, self._no_sequence)
            self.legacy_timer.daemon = True
            self.legacy_timer.start()
        try:
            if self.authenticated:
                self._attach_run()
            if self.authenticated and self.cfg.pid is not None and \
                    self.cfg.mode == "server" and self.state == "idle":
                self._start_from_command_line()
            elif self.authenticated:
                self._probe_in_background()
            self._reader()
        finally:
            self.close()
            owner = self.profiling_run.owner is self
            goes_on = self.state != "idle" and self.data_mode != "legacy"
            if owner and goes_on:
                self._detach_run()
                self.log("disconnected; the run goes on, its chunks kept for the collector "
                         "(%d held)" % len(self.profiling_run.outbox.held))
            else:
                if owner:
                    with self.profiling_run.control:
                        self.end_collection()
                    self._detach_run()
                self.log("disconnected")
            for t in threads:
                t.join(5.0)
            self.sock.close()
            self.finished.set()

    def close(self):
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        if self.legacy_timer is not None:
            self.legacy_timer.cancel()
        self.metrics_wake.set()
        self.settled.set()
        self._drop_update()

    def shutdown(self):
        """Stops profiling (the last chunk is made), drains the queue briefly, closes. (The
        Python agent keeps its outbox in memory only: what is not sent by then is lost.)"""
        with self.profiling_run.control:
            running = self.profiling_run.owner is self and self.state != "idle"
            self.end_collection()
            if running:  # the run ends with the agent: said after its last chunk
                self.state = "idle"
                self.send_state("the agent stopped")
        for _ in range(20):
            with self.cond:
                unsent = self.queue or (self._data_flows() and
                                        self.profiling_run.outbox.after(self.sent_pos) is not None)
                if not unsent or self.closed:
                    break
            time.sleep(0.1)
        self.close()

    def _attach_run(self):
        run = self.profiling_run
        with run.lock:
            if run.owner is self:
                return
            if run.state == "idle" and run.current is None:
                # A collector that attaches starts from the command line's settings; a run
                # that went on without a link keeps its own. (Not before it paired.)
                run.settings = Settings(self.cfg.frequency, self.cfg.pid, self.cfg.duration)
                run.settings.off_cpu = self.cfg.off_cpu
                run.settings.off_cpu_min_us = self.cfg.off_cpu_min_us
                run.flight_asked = flight_asked(self.cfg)
                run.overhead_asked = self.cfg.max_overhead
            run.owner = self
            if run.offline_timer is not None:
                run.offline_timer.cancel()
        self.wake_writer()
        if run.state != "idle":
            self._watch_overhead()  # (a run that went on without a link: watched from here)

    def _detach_run(self):
        run = self.profiling_run
        with run.lock:
            if run.owner is not self:
                return
            run.owner = None
            if run.state != "idle" and self.data_mode != "legacy":
                run.detached()

    def _no_sequence(self):
        """A collector that resumes runs asks `sequence` right after the hello (and the
        pairing code); one that did not in 10 s takes the data as an older collector."""
        while not self.closed and not self.authenticated:  # counted from the pairing code
            time.sleep(0.25)
        deadline = monotonic() + 10.0
        while not self.closed and self.data_mode == "held" and monotonic() < deadline:
            time.sleep(0.25)
        with self.cond:
            if self.closed or self.data_mode != "held":
                return
            self.log("the collector does not resume runs: data goes as to an older collector, "
                     "and a lost link ends the run")
            self.data_mode = "legacy"
            self.cond.notify_all()

    def _auth_expired(self):
        if not self.authenticated and not self.closed:
            self.log("no pairing code within 10 s; closing")
            self.close()

    def _reader(self):
        decoder = FrameDecoder(AGENT_MAX_FRAME)
        while not self.closed:
            try:
                data = self.sock.recv(16 << 10)
            except OSError as e:
                if not self.closed:
                    self.log("read: " + os_message(e))
                return
            if not data:
                return
            for flag, payload in decoder.feed(data):
                if self.closed:
                    return
                if self.unauthenticated_commands >= MAX_UNAUTHENTICATED_COMMANDS:
                    break  # closed below, before anything more is read or answered
                if flag != FLAG_COMMAND:
                    self.log("ignoring unexpected %s frame" % FLAG_NAMES[flag])
                    continue
                req, error = parse_command(payload)
                if req is None:
                    if not self.authenticated:
                        self.unauthenticated_commands += 1
                    self.log("bad command: " + error)
                    self.send_json(response("", error=error))
                    continue
                try:
                    resp = self.handle(req)
                except Exception as e:  # never leave the collector waiting
                    self.log("command %s failed: %s" % (req["cmd"], e))
                    resp = response(req["id"], error="internal error: %s" % e)
                # An answer that changes the run goes after the chunks made before it.
                self.send_json(resp, ordered=req["cmd"] in ("start", "stop", "pause", "resume",
                                                            "configure"))
                if self.restart_after_answer:
                    self.restart_after_answer = False
                    restart = getattr(self.cfg, "request_restart", None)
                    if restart is not None:
                        restart()
                if self.auth_failures >= MAX_AUTH_FAILURES:
                    self.log("3 failed pairing attempts; closing")
                    self.shutdown()
                    return
                # A collector that does not read its answers gets TCP backpressure: no more
                # commands are read while this much of them waits to be sent.
                with self.cond:
                    while self.reply_bytes > MAX_BACKLOG_FOR_READING and not self.closed:
                        self.cond.wait(1.0)
            if self.unauthenticated_commands >= MAX_UNAUTHENTICATED_COMMANDS:
                self.log("commands without the pairing code; closing")
                self.shutdown()  # the answers already queued still go out
                return
            if decoder.error:
                self.log("protocol error: %s; closing" % decoder.error)
                return

    def _metrics_loop(self):
        while not self.closed:
            if self.authenticated and self.metrics["enabled"]:
                try:
                    self._send_metrics()
                except Exception as e:
                    self.log("metrics: %s" % e)
            self.metrics_wake.wait(self.metrics_interval if self.authenticated
                                   else AUTH_TIMEOUT)
            self.metrics_wake.clear()

    def _send_metrics(self):
        ts, pid, sampler = time.time(), self.settings.pid, self.sampler
        self._send_metric(sampler.system(ts))
        if pid is not None:
            self._send_metric(sampler.process(pid, ts))
            if self.metrics["threads"]:
                self._send_metric(sampler.threads(pid, ts))
            self._send_metric(sampler.binaries(pid, ts), False)  # once per change: never dropped
        elif self.state != "idle":
            # The whole system: the build-ids of what runs most, for the collector to name their
            # frames and the fleet store to tell builds apart.
            for b in sampler.busiest_binaries(ts):
                self._send_metric(b, False)
        if self.metrics["network"]:
            self._send_metric(sampler.network(ts))
        if self.metrics["disk"]:
            self._send_metric(sampler.disk(ts))
        fl = self.profiling_run.flight
        if fl is not None and self.state != "idle":
            self._send_metric(flight_record(fl, ts))

    def _send_metric(self, value, droppable=True):
        if value is not None:
            self.send_json(value, FLAG_METRICS, droppable)

    # ---- commands

    def handle(self, req):
        rid, cmd, args = req["id"], req["cmd"], req["args"]
        if cmd == "auth":
            if self.token is None:
                return response(rid)
            presented = args.get("token")
            presented = presented if isinstance(presented, str) else ""
            self.guard.wait_turn(self)  # after failures, on any connection, the next one waits
            if self.closed:
                return response(rid, error="auth failed")
            if self.token and code_matches(self.token, presented):
                self.auth_failures = 0
                self.guard.succeeded()
                self.log("authenticated")
                self.authenticated = self.ever_authenticated = True
                self._attach_run()
                self.settled.set()
                if self.auth_timer is not None:
                    self.auth_timer.cancel()
                self.metrics_wake.set()  # first metrics right away
                if self.on_authenticated is not None:
                    self.on_authenticated(self)
                if self.cfg.pid is not None and self.cfg.mode == "server" and \
                        self.state == "idle":
                    self._start_from_command_line()
                else:
                    self._probe_in_background()
                return response(rid)
            self.auth_failures += 1
            failures, delay = self.guard.failed()
            self.log("wrong pairing code (%d of 3 on this connection, %d in a row; the next "
                     "attempt waits %s s)" % (self.auth_failures, failures,
                                              ("%.3f" % delay)[:4]))
            return response(rid, error="auth failed")
        if not self.authenticated:
            self.unauthenticated_commands += 1
            return response(rid, error="unauthenticated")
        handler = getattr(self, "cmd_" + cmd, None)
        if handler is None:
            return response(rid, error="unknown command: " + cmd)
        try:
            return handler(rid, args)
        except BadArgument as e:
            return response(rid, error=str(e))

    def cmd_ping(self, rid, args):
        return response(rid)

    def cmd_sequence(self, rid, args):
        after = int_arg(args, "after", 0, 2 ** 62)
        if self.data_mode == "sequenced":
            return response(rid, error="already sequenced")
        if self.compression.flag != FLAG_ZSTD:
            return response(rid, error="this agent sends its chunks uncompressed: it does not "
                                       "number them")
        named = args.get("run")
        named = named if isinstance(named, str) else ""
        run, box = self.profiling_run, self.profiling_run.outbox
        with self.cond:
            # What the collector has of the run it names goes; the rest from the oldest held.
            self.sent_pos = box.stored(named, after or 0)
            self.data_mode = "sequenced"
            self.cond.notify_all()
        if self.legacy_timer is not None:
            self.legacy_timer.cancel()
        f = {"run": run.id or None, "seq": box.last_seq, "held": len(box.held),
             "held_bytes": box.bytes, "dropped_chunks": box.dropped_chunks,
             # Chunks of the run under way this link sent before it was asked (flag 1).
             "sent": self.legacy_seq if run.id and self.legacy_run == run.id else 0,
             "state": run.state_name(), "pid": self.settings.pid,
             "captures": self._capture_notes_ahead()}
        if self.state != "idle" and named:
            self.log("resuming run %s: %d chunks to send (%d KiB)"
                     % (named, len(box.held), box.bytes >> 10))
        with run.lock:
            why, run.ended_offline = run.ended_offline, None
        if why is not None:  # a run that ended while no link was there: after its chunks
            self.log(why + "; idle")
            self.send_state(why)
        return response(rid, f)

    def _capture_notes_ahead(self):
        """The captures whose chunks this link is still to send: what fired each, and where
        each ends (one that began or ended while no link was there)."""
        box = self.profiling_run.outbox
        with box.lock:
            ahead = set(h[1] for h in box.held if h[0] > self.sent_pos)
        return [{"run": n[0], "trigger": n[1], "at": n[2], "window_s": n[3], "last_seq": n[4]}
                for n in list(self.profiling_run.capture_notes) if n[0] in ahead]

    def cmd_ack(self, rid, args):
        run, seq = args.get("run"), args.get("seq")
        if not isinstance(run, str) or isinstance(seq, bool) or not isinstance(seq, int) \
                or seq < 0:
            return response(rid, error="ack needs run and seq")
        self.profiling_run.outbox.stored(run, seq)
        return response(rid)

    def cmd_status(self, rid, args):
        s = self.settings
        f = {"state": self.profiling_run.state_name(), "pid": s.pid, "frequency": s.frequency,
             "duration": s.duration, "agent_version": VERSION, "platform": self.platform,
             "events": list(s.events),
             "capabilities": None if self.caps is None else self._capabilities_json(),
             "probing": self.probing,
             "update": (self.update_policy()
                        if self.update_policy() in ("signed", "pinned") else "refused"),
             "update_policy": self.update_policy()}
        current = self.current
        box = self.profiling_run.outbox
        f.update(lost_samples=self.lost_samples, dropped_chunks=self.dropped_chunks,
                 chunks=current.chunks if current is not None else 0,
                 run=self.profiling_run.id or None, held_chunks=len(box.held), held_bytes=box.bytes,
                 outbox_dropped_chunks=box.dropped_chunks, spooled_bytes=0)
        g = self.profiling_run.governor
        if g is not None:  # a budget: what profiling costs, the rate it takes
            now = g.effective(s)
            f["overhead"] = {"budget_pct": g.budget, "cost_pct": g.last_cost,
                             "asked_hz": g.asked_hz, "frequency": now.frequency,
                             "callgraph": now.callgraph or "none"}
        fl = self.profiling_run.flight
        if fl is not None:  # a flight recorder: what its window holds now
            f["flight"] = flight_record(fl, time.time())
            del f["flight"]["type"]
        return response(rid, f)

    def cmd_capture(self, rid, args):
        """The collector's user asks a flight recorder for what it holds, now."""
        f = self.profiling_run.flight
        if f is None or self.state != "profiling":
            return response(rid, error="not a flight recorder under way (the agent's "
                                       "--flight-recorder SECONDS)")
        answer = self.profiling_run.fire(f, "asked by the collector")
        if answer == "refused":
            return response(rid, error="the last capture began under %d s ago: try again later"
                            % f.plan.min_gap)
        return response(rid, {"state": self.profiling_run.state_name(), "capture": answer,
                              "run": self.profiling_run.id})

    # ---- updates over the link: a new version of this script (docs/protocol.md)

    def pinned_link(self):
        """This agent dialled over TLS and checked the collector's key against its --tls-pin."""
        return self.cfg.mode == "server" and self.cfg.tls_pin is not None and \
            isinstance(self.sock, TlsLink)

    def update_policy(self):
        """Which updates this agent takes ("signed", "pinned"), or why none
        (protocol/update.hpp)."""
        if not self.cfg.allow_update:
            return "disabled"
        if self.cfg.update_pubkey is not None:
            return "signed"
        if self.pinned_link():
            return "pinned"
        return "needs-key"

    def _drop_update(self):
        with self.update_lock:
            if self.update is not None:
                self.update.drop()
                self.update = None

    def cmd_update(self, rid, args):
        self._drop_update()  # an earlier offer's file goes
        if not self.cfg.allow_update:
            return response(rid, error="refused: this agent was started with --no-update")
        # A size that is not one reads as 0, which check_offer refuses after its policy: an
        # agent that takes no update says so before it judges the offer.
        size = args.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            size = 0
        offer = dict((k, args.get(k) if isinstance(args.get(k), str) else "")
                     for k in ("version", "arch", "sha256", "signature"))
        offer["size"] = size
        why = check_offer(offer, self.cfg.update_pubkey, self.pinned_link(), VERSION)
        path = None
        if not why:
            with self.update_lock:
                if self.closed:
                    why = "the connection is closed"
                else:
                    try:
                        self.update = UpdateReceiver(offer)
                        path = self.update.path
                    except OSError as e:
                        why = "cannot create %s: %s" % (
                            "." + os.path.basename(SELF) + ".update-* beside " + SELF,
                            os_message(e))
        if why:
            self.log("update refused: " + why)
            return response(rid, error=why)
        self.log("receiving agent %s (%d bytes) into %s" % (offer["version"], size, path))
        return response(rid, {"piece": MAX_UPDATE_PIECE})

    def cmd_update_data(self, rid, args):
        if self.update is None:
            return response(rid, error="no update offered")
        offset, data = args.get("offset"), args.get("data")
        why, raw = None, None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or \
                not isinstance(data, str):
            why = "update_data needs offset and data (base64)"
        elif len(data) > (MAX_UPDATE_PIECE + 2) // 3 * 4:
            why = "a piece is at most %d bytes" % MAX_UPDATE_PIECE
        else:
            raw = strict_base64(data)
            if raw is None:
                why = "data is not base64"
        received = 0
        if why is None:
            with self.update_lock:
                if self.update is None:
                    return response(rid, error="no update offered")
                why = self.update.write(offset, raw)
                received = self.update.received
        if why:
            # Any bad piece ends the offer, and its file goes with it.
            self._drop_update()
            self.log("update abandoned: " + why)
            return response(rid, error=why)
        return response(rid, {"received": received})

    def cmd_update_apply(self, rid, args):
        with self.update_lock:
            receiver, self.update = self.update, None  # whatever happens, this offer is over
        if receiver is None:
            return response(rid, error="no update offered")
        try:
            why = receiver.finish()
            if not why:
                # The new script must run here and be the version offered.
                ran = run_command([self.cfg.launcher or sys.executable, receiver.path,
                                   "--version"], 30.0)
                want = "perfwire-agent " + receiver.offer["version"]
                said = ran["out"].split("\n")[0]
                if ran["error"]:
                    why = ran["error"]
                elif ran["timed_out"]:
                    why = "--version did not answer in 30 s"
                elif ran["code"] != 0:
                    why = "--version exited with %d %s" % (ran["code"],
                                                           perf_complaint(ran["err"]))
                elif said != want:
                    why = "--version says \"%s\", not \"%s\"" % (said, want)
                if why:
                    why = "the new build does not run here: " + why
            if not why:
                why = receiver.install()
        finally:
            receiver.drop()
        if why:
            self.log("update refused: %s; this agent keeps running" % why)
            return response(rid, error=why)
        self.log("updated to %s; restarting" % receiver.offer["version"])
        self.restart_after_answer = True
        return response(rid, {"version": receiver.offer["version"], "restarting": True})

    def cmd_kallsyms(self, rid, args):
        if not self.cfg.allow_kallsyms:
            return response(rid, error="not permitted: the agent was started without "
                                       "--allow-kallsyms")
        text = read_text("/proc/kallsyms")
        if text is None:
            return response(rid, error="cannot read /proc/kallsyms")
        symbols = parse_kallsyms(text)
        if not symbols:
            return response(rid, error="the kernel hides its symbol addresses "
                                       "(kernel.kptr_restrict)")
        return response(rid, {"count": symbols.count("\n"), "symbols": symbols})

    def cmd_list_processes(self, rid, args):
        before = snapshot_processes()
        time.sleep(0.5)
        return response(rid, {"processes": top_processes(before, snapshot_processes(), 0.5)})

    def cmd_verify_pid(self, rid, args):
        pid = int_arg(args, "pid", 1, MAX_PID)
        if pid is None:
            return response(rid, error="pid required")
        stat = parse_pid_stat(read_text("/proc/%d/stat" % pid))
        f = {"pid": pid, "exists": stat is not None}
        if stat is not None:
            f["info"] = {"comm": stat["comm"], "cmdline": read_cmdline(pid)}
        return response(rid, f)

    def cmd_verify_perf(self, rid, args):
        f = {"perf_event_paranoid": read_perf_event_paranoid()}
        perf = self.cfg.perf
        path = find_program(perf)
        f["available"] = bool(path)
        if not path:
            f.update(version=None, functional=False, error=perf + " not found; install linux-perf")
            return response(rid, f)
        version, check = parallel(
            lambda: run_command([path, "--version"], 5.0),
            lambda: run_command([path, "stat", "-e", "task-clock", "--", "true"], 5.0))
        f["version"] = perf_version_line(version["out"])
        f["functional"] = check["code"] == 0
        f["error"] = None if check["code"] == 0 else check["err"][:500] + check["error"]
        return response(rid, f)

    def _capabilities_json(self):
        """What the probe found, and whether this device can record where threads wait (why
        not, else ""): the start form offers off-CPU only where it works."""
        o = self.caps.to_json()
        o["off_cpu_problem"] = off_cpu_problem(events=self.caps.record_events)
        return o

    def cmd_reprobe(self, rid, args):
        pid = int_arg(args, "pid", 1, MAX_PID)
        self._ensure_probed(self.settings.pid if pid is None else pid, True)
        return response(rid, self._capabilities_json())

    def cmd_start(self, rid, args):
        if self.state != "idle":
            return response(rid, error="already profiling")
        pid = int_arg(args, "pid", 1, MAX_PID)
        timing = timing_args(args)
        events = args.get("events")
        if events is not None and (not isinstance(events, list) or
                                   not all(isinstance(e, str) for e in events)):
            raise BadArgument("events must be an array of event names")
        if pid is None and "pid" not in args:
            pid = self.cfg.pid  # absent: the command line's --pid; explicit null: whole system
        if pid is not None and not pid_exists(pid):
            return response(rid, error="no such process: %d" % pid)
        self._ensure_probed(pid)
        # A start from the command line may have begun while this one waited for the probe.
        with self.profiling_run.control, self.lock:
            if self.state != "idle":
                return response(rid, error="already profiling")
            s, caps = self.settings, self.caps
            # Only what the probe found this perf can do (or the command line named), and a refusal
            # says why. Checked before anything changes: a refused start leaves the settings as
            # they were.
            for e in events or []:
                if e not in caps.record_events and e not in self.cfg.events:
                    return response(rid, error=caps.why_not_event(e))
            if not events and not s.events:
                return response(rid, error="this perf cannot " + (
                    caps.cannot[0] if caps.cannot else "sample any event"))
            # A call-graph mode the probe saw work ("none": no stacks).
            callgraph = args.get("callgraph")
            if callgraph is not None:
                asked = callgraph if isinstance(callgraph, str) else ""
                if asked != "none" and asked not in caps.callgraph_modes:
                    return response(rid, error=caps.why_not_callgraph(asked))
            # Where the threads wait too: a process's, never the whole system's (every switch
            # of every CPU would be more than the link takes).
            off_cpu = args.get("off_cpu")
            off_cpu_min_us = int_arg(args, "off_cpu_min_us", 0, 60000000)
            if off_cpu is not None and not isinstance(off_cpu, bool):
                return response(rid, error="off_cpu must be true or false")
            if (s.off_cpu if off_cpu is None else off_cpu) and pid is None:
                return response(rid, error="off_cpu needs a process (pid): the whole system's "
                                "switches are too many")
            why = (off_cpu_problem(events=events or s.events)
                   if (s.off_cpu if off_cpu is None else off_cpu) else "")
            if why:
                return response(rid, error=why)
            # Rounds when perf cannot stream through a pipe, or when asked for.
            mode = args.get("mode")
            if mode is not None and mode not in ("rounds", "continuous"):
                return response(rid, error="mode must be continuous or rounds")
            if mode == "continuous" and not caps.pipe_mode:
                return response(rid, error="this perf cannot write perf.data to a pipe (%s): only "
                                "mode rounds works here" % caps.pipe_problem)
            flight, why = flight_of_start(args, self.cfg, pid is not None)
            if why:
                return response(rid, error=why)
            overhead = args.get("max_overhead", self.cfg.max_overhead)
            if overhead is None:
                overhead = self.cfg.max_overhead
            if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or \
                    not (overhead == 0 or 0.1 <= overhead <= 100):
                return response(rid, error="max_overhead must be a number from 0.1 to 100 (% "
                                           "of one core; 0: none)")
            self.profiling_run.overhead_asked = float(overhead)
            self.profiling_run.flight_asked = flight
            s.pid = pid
            self._set_timing(timing)
            if callgraph is not None:
                s.callgraph = "" if callgraph == "none" else callgraph
            if off_cpu is not None:
                s.off_cpu = off_cpu
            if off_cpu_min_us is not None:
                s.off_cpu_min_us = off_cpu_min_us
            if events:
                s.events = list(events)
            s.rounds = not caps.pipe_mode or mode == "rounds"
            self._begin_collection()
        self.log("profiling %s at %d Hz" % ("pid %d" % pid if pid is not None else "the system",
                                            s.frequency))
        # The clock lets the collector place perf's timestamps (CLOCK_MONOTONIC) on the wall
        # clock.
        f = {"pid": pid, "frequency": s.frequency, "duration": s.duration,
             "events": list(s.events), "callgraph": s.callgraph or "none",
             "mode": "rounds" if s.rounds else "continuous",
             "off_cpu": s.off_cpu, "off_cpu_min_us": s.off_cpu_min_us,
             "state": self.profiling_run.state_name(),
             "run": self.profiling_run.id,
             "clock": {"monotonic": time.clock_gettime(time.CLOCK_MONOTONIC),
                       "realtime": time.time()}}
        f["max_overhead"] = self.profiling_run.overhead_asked
        fl = self.profiling_run.flight
        if fl is not None:
            f.update(flight_recorder=fl.settings["window"], after=fl.settings["after"],
                     triggers=triggers_json(fl.settings["triggers"]))
        return response(rid, f)

    def cmd_stop(self, rid, args):
        # "drain": false ends the run at once, dropping what perf script has not printed yet.
        drain = args.get("drain", True)
        if not isinstance(drain, bool):
            return response(rid, error="drain must be true or false")
        return self._halt(rid, lambda: self.state != "idle", "idle",
                          "stopped" if drain else "stopped (not drained)", drain)

    def cmd_pause(self, rid, args):
        return self._halt(rid, lambda: self.state == "profiling", "paused", "paused")

    def _halt(self, rid, allowed, state, what, drain=True):
        with self.profiling_run.control:
            if not allowed():
                return response(rid, error="not profiling")
            self.end_collection(drain)
            self.state = state
            if state == "idle":
                self.profiling_run.capture_ended()
        self.log("profiling " + what)
        return response(rid, {"state": state})

    def cmd_resume(self, rid, args):
        with self.profiling_run.control:
            if self.state != "paused":
                return response(rid, error="not paused")
            self._begin_collection()
        self.log("profiling resumed")
        return response(rid, {"state": "profiling"})

    def cmd_configure(self, rid, args):
        timing = timing_args(args)
        with self.profiling_run.control:
            self._set_timing(timing)
            g = self.profiling_run.governor
            if g is not None and timing[0] is not None:
                g.ask(timing[0])  # (the budget holds from this rate)
            if self.state == "profiling":  # takes effect now: restart with the new settings
                self.end_collection()
                self._begin_collection()
        return response(rid, {"frequency": self.settings.frequency,
                              "duration": self.settings.duration})

    def cmd_configure_metrics(self, rid, args):
        for key in ("enabled", "network", "disk", "threads"):
            if isinstance(args.get(key), bool):
                self.metrics[key] = args[key]
        interval = int_arg(args, "interval", 1, 60000)
        if interval is not None:  # seconds, or milliseconds when large
            ms = interval * 1000 if interval <= 60 else interval
            self.metrics_interval = min(max(ms, 250), 60000) / 1000.0
        self.metrics_wake.set()
        m = self.metrics
        return response(rid, {"enabled": m["enabled"], "interval": self.metrics_interval,
                              "network": m["network"], "disk": m["disk"],
                              "threads": m["threads"]})

    # ---- profiling

    def _set_timing(self, timing):
        freq, dur = timing
        if freq is not None:
            self.settings.frequency = freq
        if dur is not None:
            self.settings.duration = dur

    def _start_from_command_line(self):
        """--server with --pid: profiling starts once perf is probed, beside the reader, so
        the hello, the pairing answer and any command are answered meanwhile, and status says
        a probe is under way."""
        if pid_exists(self.cfg.pid):
            self._probe_in_background()  # claimed now; the start below waits for it
        if self.probing:  # said now, before any command is answered: "probing perf"
            self.send_json({"type": "state", "state": "idle", "reason": "probing perf",
                            "pid": self.cfg.pid, "lost_samples": self.lost_samples},
                           ordered=True)
        start_thread(self._auto_start, "auto-start")

    def _auto_start(self):
        # Told what to profile on the command line (--server, --pid): start without waiting
        # for a command, and say so, since the collector did not ask.
        pid = self.cfg.pid
        if pid is None or self.cfg.mode != "server" or self.state != "idle":
            return
        if not pid_exists(pid):
            self.log("no such process: %d; idle" % pid)
            self.send_state("no such process: %d" % pid)
            return
        self._ensure_probed(pid)
        with self.profiling_run.control, self.lock:
            if self.state != "idle" or self.closed:
                return  # a start command came first, or the collector left
            if not self.settings.events:
                why = "this perf cannot " + (self.caps.cannot[0] if self.caps.cannot
                                             else "sample any event")
                self.log(why + "; idle")
                self.send_state(why)
                return
            why = (off_cpu_problem(events=self.settings.events)
                   if self.settings.off_cpu else "")
            if why:
                self.log(why + "; idle")
                self.send_state(why)
                return
            self.settings.pid = pid
            self.settings.rounds = not self.caps.pipe_mode
            self._begin_collection()
        self.send_state("started from the command line")

    def _probe_in_background(self):
        """Right after authentication: the capabilities are ready for the first status and
        start, and status says a probe is under way meanwhile."""
        with self.probe_cond:
            if self.caps is not None or self.probing or self.closed \
                    or self._recall_probe(self.settings.pid):
                return
            # Claimed here, not when the thread first runs: a status read right after the
            # authentication must already say a probe is under way.
            self.probing = True
        pid = self.settings.pid

        def run():
            try:
                self._run_probe(pid)
            except Exception as e:  # said, never fatal: a start probes again
                self.log("probe failed: %s" % e)
        try:
            start_thread(run, "probe")
        except Exception:  # no thread: release the claim, a start probes itself
            with self.probe_cond:
                self.probing = False
                self.probe_cond.notify_all()
            raise

    def _ensure_probed(self, pid, again=False):
        with self.probe_cond:
            while self.probing:  # one probe at a time: a start waits for the one under way
                self.probe_cond.wait()
            if self.caps is not None and (self.probed_pid == pid or self.caps.judged) \
                    and not again:
                return
            if not again and self._recall_probe(pid):
                return
            self.probing = True
        self._run_probe(pid)

    def _recall_probe(self, pid):
        """What an earlier connection's probe found, when it holds for `pid` (probe_cond
        held)."""
        known = PROBED.recall(pid)
        if known is None:
            return False
        self.log("probe: perf as found at an earlier start, kept in %s (reprobe to probe it "
                 "again)" % PROBED.state_dir if known[2] else
                 "probe: perf as found at an earlier connection (reprobe to probe it again)")
        use_capabilities(self.settings, known[0], self.cfg.events)
        self.caps, self.probed_pid = known[0], known[1]
        return True

    def _run_probe(self, pid):
        """Probes perf; self.probing was set by the caller and is released here."""
        caps = None
        try:
            caps = probe_settings(self.settings, self.cfg.perf, pid, self.cfg.events, self.log)
            self.log("probe: sampling %s, call graphs %s, %s (%s s)"
                     % (caps.record_events[0] if caps.record_events else "nothing",
                        caps.callgraph or "none", "continuous" if caps.pipe_mode else "rounds",
                        seconds_text(caps.probe_seconds)))
        finally:
            with self.probe_cond:
                if caps is not None:
                    self.caps, self.probed_pid = caps, pid
                    PROBED.remember(caps, pid)
                self.probing = False
                self.probe_cond.notify_all()

    def _begin_collection(self, force=False):
        if self.closed and not force:
            return  # the connection is gone: nobody would receive the chunks
        s, run = self.settings, self.profiling_run
        # perf stat counts the sampling events and the probe's extras alongside.
        s.stat_events = list(s.events)
        for e in (self.caps.stat_only_events if self.caps else []):
            if e not in s.stat_events:
                s.stat_events.append(e)
        with self.lock:
            if self.state == "idle":  # a new run (not a resume after pause)
                run.id = os.urandom(16).hex()
                run.begin_flight()
                run.governor = None
                if run.overhead_asked > 0:
                    modes = self.caps.callgraph_modes if self.caps else []
                    run.governor = OverheadGovernor(run.overhead_asked, s.frequency,
                                                    s.callgraph == "dwarf", "fp" in modes,
                                                    rungs=self._ladder_rungs(s))
                    run.meter = CostMeter()
        # The chunks go to the run's outbox; a flush waits while the link still holds
        # earlier data, or there is no link.
        c = Collection(self.cfg.perf, run.effective(), self.compression.make(), run.add,
                       run.collection_done, run.may_flush)
        with self.lock:
            self.current = c
            self.state = "profiling"
        c.start()
        self._watch_overhead()

    def _ladder_rungs(self, s):
        """How many rates perf record may hold at once for a run of `s`: where its control
        descriptor takes event names and the events take a rate each — a file descriptor per
        event, rate and thread (or CPU), at most 1,000 of them (the usual limit: 1,024)."""
        version = self.caps.perf_version if self.caps else \
            (getattr(self, "platform", None) or {}).get("perf_version", "")
        if s.rounds or not ladder_possible(s) or not perf_enables_by_name(version):
            return 0
        units = os.cpu_count() or 1
        if s.pid:
            try:
                units = len(os.listdir("/proc/%d/task" % s.pid))
            except OSError:
                units = 1
        return max(0, min(1000 // (max(1, units) * len(s.events)), 16))

    def _watch_overhead(self):
        # One loop at a time, the attached session's: a loop of a session gone ends at its
        # next reading (the new one watches from now).
        run = self.profiling_run
        with run.lock:
            if run.governor is None or run.watcher is self or run.owner is not self or \
                    self.closed:
                return
            run.watcher = self
        start_thread(self._overhead_loop, "overhead")

    def _overhead_loop(self):
        """--max-overhead: every 5 s the cost of profiling against the budget; a change of
        rate enables a rate of the ladder perf record holds, or else restarts the collection
        (the run's, whatever the link does meanwhile), and is said in a state notice."""
        run = self.profiling_run

        def watching():
            return not self.closed and run.watcher is self and run.owner is self and \
                run.governor is not None and self.state != "idle"
        try:
            run.meter.read(monotonic())  # from now
            while watching():
                self.finished.wait(5.0)
                if not watching():
                    return
                cost = run.meter.read(monotonic())
                if cost is None or self.state != "profiling" or self.current is None:
                    continue  # (paused: nothing to judge)
                change = run.governor.feed_now(cost)  # (the governor holds the rate now)
                if change is None:
                    continue
                self.log(change[2])
                # A rate perf record already holds: told, nothing restarts (unless a configure
                # meanwhile asked another rate: the change is no longer the run's).
                with run.control:
                    c = self.current
                    if run.governor is None or run.governor.hz != change[0]:
                        continue
                    told = not change[1] and c is not None and c.set_rate(change[0])
                if told:
                    if not self.closed:
                        self.send_state(change[2])
                    continue
                run.governor.restarted()
                with run.control:
                    self.end_collection()
                    if self.state != "profiling" or self.current is not None or \
                            (self.closed and self.data_mode == "legacy"):
                        return  # stopped or paused meanwhile, or a run that ends with its link
                    self._begin_collection(force=True)
                if not self.closed:
                    self.send_state(change[2])
        finally:
            with run.lock:
                if run.watcher is self:
                    run.watcher = None

    def end_collection(self, drain=True):
        """Stops the collection and waits until its last chunk is made."""
        if self.profiling_run.owner is not None and self.profiling_run.owner is not self:
            return  # another connection's (a --listen newcomer that did not pair)
        while True:
            c = self.current
            if c is None:
                return
            c.request_stop(drain)
            c.done.wait()


# ================================================================================ modes


class Backoff(object):
    """Reconnect delays: 1, 2, 4 ... s capped at 30 s, each up to 20 % shorter at random."""

    def __init__(self):
        self.attempt, self.rng = 0, random.SystemRandom()

    def next(self):
        base = 2.0 ** min(self.attempt, 5)  # 1, 2, 4 ... 32
        self.attempt += 1
        return min(base, 30.0) * self.rng.uniform(0.8, 1.0)

    def reset(self):
        self.attempt = 0


class TlsLink(object):
    """TLS over a connected socket, through ssl.MemoryBIO: the session's reader and writer
    threads share one SSLObject under a lock (OpenSSL's objects are not for two threads at
    once), and the socket's own reads and writes stay outside it. Records leave in the order
    they were made: whoever sends takes everything made so far, under the send lock."""

    def __init__(self, sock, context, server_side, timeout=10.0):
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=server_side)
        self.lock, self.send_lock = threading.Lock(), threading.Lock()
        deadline = monotonic() + timeout
        sock.settimeout(timeout)
        try:
            while True:
                try:
                    with self.lock:
                        self.obj.do_handshake()
                    self._flush()
                    break
                except ssl.SSLWantReadError:
                    self._flush()
                    left = deadline - monotonic()
                    if left <= 0:
                        raise OSError(errno.ETIMEDOUT, "no TLS handshake within %d s" % timeout)
                    sock.settimeout(left)
                    data = sock.recv(16 << 10)
                    if not data:
                        raise OSError(errno.ECONNRESET,
                                      "the peer closed the connection during the TLS handshake")
                    with self.lock:
                        self.incoming.write(data)
        except socket.timeout:
            raise OSError(errno.ETIMEDOUT, "no TLS handshake within %d s" % timeout)
        except ssl.SSLError as e:
            raise OSError(errno.EPROTO, "TLS handshake failed: %s" % (e.reason or e))
        except ValueError as e:  # Python 3.5/3.6: a host name the CA's certificate lacks
            raise OSError(errno.EPROTO, "TLS handshake failed: %s" % e)
        finally:
            sock.settimeout(None)
        self.version = self.obj.version() or "TLS"

    def peer_pin(self):
        """"sha256:<hex>" of the certificate the peer presented ("" when none)."""
        der = self.obj.getpeercert(binary_form=True)
        return "sha256:" + hashlib.sha256(der).hexdigest() if der else ""

    def _flush(self, only_pending=False):
        if only_pending:  # the reader: never wait behind the writer's send for nothing
            with self.lock:
                if not self.outgoing.pending:
                    return
        with self.send_lock:
            with self.lock:
                data = self.outgoing.read()
            if data:
                self.sock.sendall(data)

    def sendall(self, data):
        with self.lock:
            self.obj.write(data)
        self._flush()

    def recv(self, n):
        while True:
            with self.lock:
                try:
                    data = self.obj.read(n)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    data = b""
                except ssl.SSLError as e:
                    raise OSError(errno.EPROTO, "TLS: %s" % (e.reason or e))
            self._flush(True)  # what reading made (TLS 1.3 tickets, key updates) goes out
            if data is not None:
                return data
            raw = self.sock.recv(64 << 10)
            with self.lock:
                if raw:
                    self.incoming.write(raw)
                else:
                    self.incoming.write_eof()

    def getpeername(self):
        return self.sock.getpeername()

    def setsockopt(self, *args):
        return self.sock.setsockopt(*args)

    def shutdown(self, how):
        return self.sock.shutdown(how)

    def close(self):
        return self.sock.close()


def tls_context(server):
    """A context that speaks TLS 1.2 or later (Python 3.5 and on)."""
    name = "PROTOCOL_TLS_SERVER" if server else "PROTOCOL_TLS_CLIENT"
    context = ssl.SSLContext(getattr(ssl, name, ssl.PROTOCOL_SSLv23))
    if hasattr(ssl, "TLSVersion"):
        context.minimum_version = ssl.TLSVersion.TLSv1_2
    else:
        context.options |= ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3 | ssl.OP_NO_TLSv1 | ssl.OP_NO_TLSv1_1
    return context


def tls_client_context(cfg):
    """The context of a --server agent with --tls-pin (any chain; the pin is checked after the
    handshake) or --tls-ca (the chain and the host name)."""
    context = tls_context(server=False)
    if cfg.tls_ca is not None:
        context.load_verify_locations(cfg.tls_ca)
        context.verify_mode = ssl.CERT_REQUIRED  # (before check_hostname: Python 3.5 asks)
        context.check_hostname = True
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def tls_connect(sock, cfg, context):
    """The TLS link to the collector, checked; raises OSError saying why it is refused."""
    link = TlsLink(sock, HostContext(context, cfg.server_host), server_side=False)
    if cfg.tls_pin is not None and link.peer_pin() != cfg.tls_pin:
        sock.close()
        raise OSError(errno.EPROTO, "the peer's key is %s, not the pinned %s: refused (a "
                                    "different collector, or someone in between)"
                      % (link.peer_pin() or "(none)", cfg.tls_pin))
    return link


class HostContext(object):
    """An SSLContext whose wrap_bio names the host dialled (for SNI and the CA's name check)."""

    def __init__(self, context, host):
        self.context, self.host = context, host

    def wrap_bio(self, incoming, outgoing, server_side):
        return self.context.wrap_bio(incoming, outgoing, server_side=server_side,
                                     server_hostname=self.host)


def load_tls_identity(path):
    """(server context, pin) for a --listen --tls agent, from `path` holding its key and
    certificate (PEM). This Python cannot make a key: the file must be there."""
    try:
        with open(path) as f:
            text = f.read()
    except (IOError, OSError) as e:
        raise OSError(e.errno or errno.ENOENT,
                      "cannot read %s (%s): this Python cannot make a key; make it once with "
                      "the C++ agent (perfwire-agent --listen --tls --tls-key %s) or with "
                      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                      "-days 7300 -subj /CN=perfwire-agent -keyout F -out F (F: the file), "
                      "keys and certificate in one file" % (path, os_message(e), path))
    match = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", text, re.S)
    if not match:
        raise OSError(errno.EINVAL, "%s holds no certificate" % path)
    der = ssl.PEM_cert_to_DER_cert(match.group(0))
    context = tls_context(server=True)
    try:
        context.load_cert_chain(path, path)
    except (ssl.SSLError, OSError) as e:
        raise OSError(errno.EINVAL, "%s: not a key and its certificate (%s)" % (path, e))
    return context, "sha256:" + hashlib.sha256(der).hexdigest()


def connect(host, port, stop, timeout=10.0):
    """Resolves `host` (on every attempt) and tries each address until one connects."""
    deadline = monotonic() + timeout
    last = OSError(errno.EHOSTUNREACH, os.strerror(errno.EHOSTUNREACH))
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            err = sock.connect_ex(address)
            while err in (errno.EINPROGRESS, errno.EALREADY, errno.EAGAIN):
                left = deadline - monotonic()
                if left <= 0 or stop.is_set():
                    err = errno.ETIMEDOUT
                    break
                if select.select([], [sock], [], min(left, 0.2))[1]:
                    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, os.strerror(err))
            sock.setblocking(True)
            return sock
        except OSError as e:
            sock.close()
            last = e
    raise last


def server_mode(cfg, compression, stop):
    backoff = Backoff()
    run = Run(cfg)  # the agent's, whichever connection sends it
    target = "%s:%d" % (cfg.server_host, cfg.server_port)
    while not stop.is_set():
        failure = None
        try:
            sock = connect(cfg.server_host, cfg.server_port, stop)
            if cfg.tls_context is not None:
                try:
                    sock = tls_connect(sock, cfg, cfg.tls_context)
                except OSError:
                    sock.close()
                    raise
        except (OSError, socket.error) as e:
            failure = os_message(e)
        else:
            log("connected to collector " + target + (
                " (%s, its key %s)" % (sock.version, "pinned" if cfg.tls_pin else
                                       "checked by CA") if isinstance(sock, TlsLink)
                else " (plain TCP)"))
            session = Session(sock, cfg, cfg.token, compression, run=run)
            thread = start_thread(session.run, "session")
            while thread.is_alive():
                thread.join(0.2)
                if stop.is_set():
                    session.shutdown()
                    thread.join(5.0)
                    break
            if session.ever_authenticated:
                backoff.reset()
        if stop.is_set():
            break
        delay = backoff.next()
        log("%s; retrying in %s s" % ("cannot reach collector %s: %s" % (target, failure)
                                      if failure else "connection to %s ended" % target,
                                      seconds_text(delay)))
        stop.wait(delay)
    end_run(run)
    return 0


def end_run(run):
    """Stopped while no link carries the run (SIGTERM during an outage): it ends as it would
    with a link, perf flushing."""
    current = run.current
    if current is not None:
        current.request_stop()
        current.done.wait(35.0)
    run.state = "idle"


def listen_mode(cfg, compression, stop):
    context = None
    if cfg.listen_tls:
        try:
            context, pin = load_tls_identity(cfg.tls_key)
        except OSError as e:
            log("cannot set up TLS: " + os_message(e))
            return 1
    token = cfg.token or ""
    if not token:
        token = generate_typeable_code()
        log("pairing code: " + token)
    if context is not None:
        log("this device's key: %s (give it to the collector with the pairing code)" % pin)
    family = None
    for fam in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(fam, cfg.bind)
            family = fam
            break
        except (OSError, ValueError):
            pass
    if family is None:
        log("bad --bind address " + cfg.bind)
        return 2
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((cfg.bind, cfg.port))
        listener.listen(128)
    except OSError as e:
        log("cannot listen on %s:%d: %s" % (cfg.bind, cfg.port, os_message(e)))
        listener.close()
        return 1
    log("listening on %s:%d" % (cfg.bind, listener.getsockname()[1]))
    listener.settimeout(0.2)

    # One collector at a time: a newcomer may connect, but only when it presents the pairing
    # code does it take over and the older connection is closed. A collector that crashed
    # never locks the device out; nobody without the code can disturb a running session.
    active, lock, sessions = [None], threading.Lock(), []
    # One connection without the code at a time: the next waits in the listen backlog until it
    # has authenticated or gone. Failures back off across connections (PairingGuard).
    guard, unsettled = PairingGuard(), None
    run = Run(cfg)  # the agent's, whichever connection sends it

    def on_authenticated(me):
        with lock:
            previous, active[0] = active[0], me
        if previous is not None and previous is not me and not previous.finished.is_set():
            log("collector %s took over from %s" % (me.peer, previous.peer))
            previous.close()

    while not stop.is_set():
        if unsettled is not None and not unsettled.settled.wait(0.2):
            continue
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        except OSError as e:
            if stop.is_set():
                break
            log("accept: " + os_message(e))
            time.sleep(0.1)
            continue
        conn.settimeout(None)
        if context is not None:
            # One connection without the code at a time, so its handshake may hold the
            # listener: it has 10 s, as the code has.
            try:
                conn = TlsLink(conn, context, server_side=True)
            except OSError as e:
                log("[%s] %s; closing" % (peer_text(conn), os_message(e)))
                conn.close()
                continue
        session = Session(conn, cfg, token, compression, on_authenticated, guard, run)
        unsettled = session
        sessions = [s for s in sessions if not s.finished.is_set()] + [session]
        start_thread(session.run, "session")
    listener.close()
    sessions = [s for s in sessions if not s.finished.is_set()]
    for s in sessions:
        s.shutdown()
    for s in sessions:  # let them finish their shutdown
        s.finished.wait(5.0)
    end_run(run)
    return 0


def find_program(name):
    """The path perf (or any program) runs from: "" when it is not there."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else ""
    return shutil.which(name) or ""


def output_mode(cfg, stop):
    if not os.path.exists("/proc/%d" % cfg.pid):
        log("no such process %d" % cfg.pid)
        return 1
    why = off_cpu_problem(events=cfg.events) if cfg.off_cpu else ""
    if why:
        log(why)
        return 1
    try:
        out = sys.stdout.buffer if cfg.output == "-" else open(cfg.output, "wb")
    except (OSError, IOError) as e:
        log("cannot write %s: %s" % (cfg.output, os_message(e)))
        return 1
    s = Settings(cfg.frequency, cfg.pid, cfg.duration)
    s.off_cpu = cfg.off_cpu
    s.off_cpu_min_us = cfg.off_cpu_min_us
    known = PROBED.recall(cfg.pid)  # what an earlier start found of this perf
    if known is not None:
        log("probe: perf as found at an earlier start, kept in " + cfg.state_dir)
        caps = known[0]
        use_capabilities(s, caps, cfg.events)
    else:
        caps = probe_settings(s, cfg.perf, cfg.pid, cfg.events, log)
        PROBED.remember(caps, cfg.pid)
    if not s.events:
        if out is not sys.stdout.buffer:
            out.close()
            os.remove(cfg.output)
        log("no data: this perf cannot sample any event")
        return 1
    s.stat_events = s.events + caps.stat_only_events
    s.rounds = not caps.pipe_mode
    written = {"n": 0, "failed": False}

    s.periods = cfg.rounds  # the last round ends with the drain: no partial round after it
    # Each round starts with the target's binaries and their build-ids when they changed, as
    # the live link sends them, so the recording imported later is named as a live session.
    sampler = MetricsSampler()

    def on_chunk(text):
        if written["failed"]:
            return
        binaries = sampler.binaries(cfg.pid, time.time())
        if binaries is not None:
            text = METRICS_NOTE + to_json(binaries) + b"\n" + text
        try:
            out.write(text)
            out.flush()
        except (OSError, IOError, ValueError):
            written["failed"] = True
            coll.request_stop()
        written["n"] += 1

    coll = Collection(cfg.perf, s, TextBuffer(), on_chunk)
    log("profiling pid %d for %d round(s) of %d s" % (cfg.pid, cfg.rounds, cfg.duration))
    coll.start()
    while not coll.done.wait(0.1):
        if stop.is_set():  # a signal ends the run early, still through SIGINT
            coll.request_stop()
    if out is not sys.stdout.buffer:
        out.close()
    if coll.chunker.folder:
        log(coll.chunker.folder.summary())
    if written["failed"]:
        log("write failed: " + cfg.output)
        return 1
    if written["n"] == 0 or coll.script_bytes == 0:
        # A file of perf stat's complaint alone would pass for a recording: none is left.
        if out is not sys.stdout.buffer:
            os.remove(cfg.output)
        why = perf_complaint(coll.record_err.decode("utf-8", "replace"))
        log("no samples: " + (coll.error or ("perf record said: " + why if why
                                             else "perf recorded nothing (perf record exited with "
                                             "status %s)" % coll.record_status)))
        return 1
    return 0
# ================================================================================ main

HELP = """\
perfwire-agent: profile a process with perf and stream it to a perfwire collector

Modes (exactly one):
  --server arg          dial the collector at HOST[:PORT] (port 9999)
  --listen              wait for the collector to connect (pairing code 
                        required)
  --output arg          profile --pid headless, write text to FILE or -
  --bind arg (=0.0.0.0) --listen address
  --port arg (=9999)    --listen port (0: any free port)
  --rounds arg (=1)     --output: rounds to collect
  --pid arg             process to profile (default: whole system)
  --frequency arg (=99) sampling frequency, Hz
  --duration arg (=8)   seconds per chunk or round
  --events arg          comma-separated perf events
  --off-cpu             also record where the target's threads wait off the 
                        CPU (the off-cpu event: scheduler switches, in ns)
  --off-cpu-min-us arg (=0)
                        --off-cpu: waits shorter than this many microseconds 
                        are not sent
  --flight-recorder arg (=0)
                        profile on but send nothing: keep the last this many
                        seconds (1-3600) and send them when a trigger fires (a
                        --trigger-* below, SIGUSR1, the collector's capture),
                        then --after more
  --after arg (=10)     --flight-recorder: seconds sent after a trigger
                        (0-3600); one firing meanwhile extends it
  --flight-memory-mb arg (=16)
                        --flight-recorder: the most memory its window holds
                        (1-1024)
  --trigger-cpu arg     --flight-recorder: fire when the --pid process uses PCT
                        % of a core for SECONDS (PCT[:SECONDS], 1 s by default)
  --trigger-memory arg  --flight-recorder: fire when the device's memory in use
                        is PCT % for SECONDS
  --trigger-load arg    --flight-recorder: fire when the 1-minute load average
                        is LOAD for SECONDS (LOAD[:SECONDS])
  --trigger-log arg     --flight-recorder: fire when a line added to the log
                        FILE matches REGEX (FILE:REGEX, grep -E syntax; a
                        rotated log is followed)
  --trigger-process arg --flight-recorder: fire when a process of this name (as
                        ps shows it) starts or exits
  --trigger-file arg    --flight-recorder: fire when this file appears or is
                        touched (for scripts)
  --max-overhead arg    keep what profiling costs (perf and this agent) within PCT
                        % of one core: the sampling rate goes down (DWARF stacks
                        give way to frame pointers first), each change said
  --offline-max arg (=21600)
                        seconds a run goes on without a link to the collector 
                        (its chunks kept for it)
  --buffer-mb arg (=16) memory for the chunks the collector has not stored yet 
                        (the oldest go first past it)
  --state-dir arg       keep what the perf probe found here for the next start 
                        ("": nowhere; default /var/lib/perfwire-agent for root, 
                        else ~/.local/state/perfwire-agent)
  --name arg            this device's name at the collector (default: the host 
                        name)
  --token arg           pairing code (or env PERFWIRE_TOKEN)
  --enroll arg          --server: the collector's enrollment token (or env 
                        PERFWIRE_ENROLL_TOKEN)
  --perf arg (=perf)    perf executable
  --allow-kallsyms      send this device's kernel symbols (/proc/kallsyms) when
                        the collector asks, to name kernel frames perf could 
                        not
  --tls-pin arg         --server: encrypt the link (TLS) and take only the 
                        collector whose key is this sha256:… (it prints it at
                        start; the UI's commands carry it)
  --tls-ca arg          --server: encrypt the link and take a collector whose 
                        certificate chains to this CA file (PEM) and names the 
                        host dialled
  --tls                 --listen: encrypt the link with this device's key; its 
                        sha256 is printed with the pairing code, for the 
                        collector to pin
  --tls-key arg         --listen --tls: where this device's key and certificate
                        are kept (made on the first start; default 
                        /var/lib/perfwire-agent/tls.pem)
  --update-pubkey arg   take updates over the link only when signed by this 
                        key: ed25519:… as the collector prints it, or a file 
                        holding it
  --update-key arg      the same as --update-pubkey (older name)
  --no-update           refuse updates over the link
  --launcher arg        run new agent builds through this program (an emulator 
                        or loader) to check and restart them
  --version             print the version and exit
  --help                print this help and exit
"""

OPTIONS = ["server", "listen", "output", "bind", "port", "rounds", "pid", "frequency",
           "duration", "events", "off-cpu", "off-cpu-min-us", "flight-recorder", "after",
           "flight-memory-mb", "trigger-cpu", "trigger-memory", "trigger-load", "trigger-log",
           "trigger-process", "trigger-file", "max-overhead", "offline-max", "buffer-mb", "state-dir", "name",
           "token", "enroll", "perf", "allow-kallsyms", "tls-pin",
           "tls-ca", "tls", "tls-key", "update-pubkey", "update-key", "no-update", "launcher",
           "version", "help"]
FLAGS = ("listen", "off-cpu", "allow-kallsyms", "tls", "no-update", "version", "help")  # without a value
INT_OPTIONS = ("port", "rounds", "pid", "frequency", "duration", "off-cpu-min-us", "offline-max",
               "buffer-mb", "flight-recorder", "after", "flight-memory-mb")
DEFAULTS = {"bind": "0.0.0.0", "port": "9999", "rounds": "1", "frequency": "99",
            "off-cpu-min-us": "0", "flight-recorder": "0", "after": "10",
            "flight-memory-mb": "16",
            "duration": "8", "perf": "perf", "offline-max": "21600", "buffer-mb": "16"}


class ExitNow(Exception):
    def __init__(self, code, output):
        Exception.__init__(self, output)
        self.code, self.output = code, output


def usage(why):
    return ExitNow(2, "perfwire-agent: %s\n\n%s\n" % (why, HELP))


class Config(object):
    pass


def match_option(name):
    """The option a (possibly abbreviated) long name means; None if none."""
    if name in OPTIONS:
        return name
    found = [o for o in OPTIONS if o.startswith(name)]
    if len(found) > 1:
        found = ["'--%s'" % o for o in sorted(found)]
        listed = (", ".join(found[:-1]) + ("," if len(found) > 2 else "") + " and " + found[-1])
        raise usage("option '--%s' is ambiguous and matches %s" % (name, listed))
    return found[0] if found else None


def parse_command_line(argv, env_token, env_enroll=None):
    """Flags as the C++ agent takes them (Boost.Program_options: unique prefixes accepted,
    --name value or --name=value); raises ExitNow for --help, --version and usage errors."""
    given = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            break  # the rest is positional, which the agent ignores
        if not token.startswith("-") or token == "-":
            continue
        name, eq, value = token[2:].partition("=") if token.startswith("--") else ("", "", "")
        option = match_option(name) if name else None
        if option is None:
            raise usage("unrecognised option '%s'" % token)
        if option in FLAGS:
            if eq:
                raise usage("option '--%s' does not take any arguments" % option)
            value = None
        elif eq:
            if not value:
                raise usage("the argument for option '--%s' should follow immediately after "
                            "the equal sign" % option)
        else:
            nxt = argv[i] if i < len(argv) else None
            if nxt is None or (nxt.startswith("--") and len(nxt) > 2 and
                               any(o.startswith(nxt[2:].partition("=")[0]) for o in OPTIONS)):
                raise usage("the required argument for option '--%s' is missing" % option)
            value = nxt
            i += 1
        given.append((option, value))

    values = {}
    for option, value in given:
        if option in values:
            raise usage("option '--%s' cannot be specified more than once" % option)
        if option in INT_OPTIONS:
            if not re.match(r"[+-]?\d+$", value) or not -2 ** 31 <= int(value) < 2 ** 31:
                raise usage("the argument %sfor option '--%s' is invalid"
                            % ("('%s') " % value if value else "", option))
        values[option] = value
    if "help" in values:
        raise ExitNow(0, HELP + "\n")
    if "version" in values:
        raise ExitNow(0, "perfwire-agent %s\n" % VERSION)
    if sum(1 for m in ("server", "listen", "output") if m in values) != 1:
        raise usage("choose exactly one of --server, --listen, --output")

    c = Config()
    c.mode = [m for m in ("server", "listen", "output") if m in values][0]
    c.server_host, c.server_port, c.output = "", 9999, values.get("output", "")
    if c.mode == "server":
        target = values["server"]
        c.server_host, colon, port = target.rpartition(":")
        if not colon:
            c.server_host = target
        elif not re.match(r"\d+$", port) or not 0 < int(port) <= 65535:
            raise usage("bad port in --server " + target)
        else:
            c.server_port = int(port)
        if not c.server_host:
            raise usage("--server needs a host")
    given_names = set(values)
    for key, default in DEFAULTS.items():
        values.setdefault(key, default)
    c.bind, c.perf = values["bind"], values["perf"]
    c.port, c.rounds = int(values["port"]), int(values["rounds"])
    c.frequency, c.duration = int(values["frequency"]), int(values["duration"])
    c.offline_max, c.buffer_mb = int(values["offline-max"]), int(values["buffer-mb"])
    c.state_dir = values["state-dir"] if "state-dir" in values else default_state_dir()
    c.pid = int(values["pid"]) if "pid" in values else None
    c.events = [e for e in values.get("events", "").split(",") if e]
    c.token = values["token"] if "token" in values else (env_token or None)
    c.enroll = values["enroll"] if "enroll" in values else (env_enroll or None)
    c.allow_kallsyms = "allow-kallsyms" in values
    c.off_cpu = "off-cpu" in values
    c.off_cpu_min_us = int(values["off-cpu-min-us"])
    c.max_overhead = 0.0
    if "max-overhead" in values:
        try:
            c.max_overhead = float(values["max-overhead"])
        except ValueError:
            c.max_overhead = -1.0
        if not 0.1 <= c.max_overhead <= 100:
            raise usage("--max-overhead must be 0.1-100 (% of one core)")
        if c.mode == "output":
            raise usage("--max-overhead adapts a run a collector sees (--server or --listen)")
    c.flight_recorder = int(values["flight-recorder"])
    c.after, c.flight_memory_mb = int(values["after"]), int(values["flight-memory-mb"])
    c.triggers = dict((key, values.get(flag, "")) for key, flag in TRIGGER_FLAGS)
    c.name = values.get("name")
    if c.name is not None and (not c.name or len(c.name.encode("utf-8", "surrogateescape")) > 200
                               or any(ord(ch) < 0x20 or ord(ch) == 0x7f for ch in c.name)):
        raise usage("--name takes 1 to 200 bytes, no control characters")
    c.allow_update = "no-update" not in values
    c.update_pubkey = None
    for name in ("update-pubkey", "update-key"):
        if name not in values or c.update_pubkey is not None:
            continue
        text = values[name]
        if not text.startswith("ed25519:"):
            try:
                with open(text) as f:
                    text = f.read(4096)
            except (IOError, OSError, UnicodeError):
                raise usage("cannot read --%s %s" % (name, values[name]))
        if weak_public_key(text):
            raise usage("--%s is a weak key (a point of small order): any signature would "
                        "verify under it. Give the collector's update key as it prints it"
                        % name)
        c.update_pubkey = parse_public_key(text)
        if c.update_pubkey is None:
            raise usage("--%s takes the collector's update key as it prints it (ed25519: and "
                        "44 characters of base64), or a file holding it" % name)
    c.tls_pin = None
    if "tls-pin" in values:
        c.tls_pin = parse_pin(values["tls-pin"])
        if c.tls_pin is None:
            raise usage("--tls-pin takes sha256: and 64 hex digits, as the collector prints it")
    c.tls_ca = values.get("tls-ca")
    if (c.tls_pin or c.tls_ca) and c.mode != "server":
        raise usage("--tls-pin and --tls-ca are for --server (a --listen agent uses --tls)")
    if c.tls_pin and c.tls_ca:
        raise usage("give --tls-pin or --tls-ca, not both")
    c.listen_tls = "tls" in values
    if c.listen_tls and c.mode != "listen":
        raise usage("--tls is for --listen (a --server agent uses --tls-pin or --tls-ca)")
    c.tls_key = values.get("tls-key", "/var/lib/perfwire-agent/tls.pem")
    c.tls_context = None
    c.launcher = values.get("launcher", "")
    c.argv = list(argv)
    if c.token is not None and code_strength_bits(c.token) < MIN_CODE_BITS:
        raise usage("the pairing code is too easy to guess (about %d bits): use at least 10 "
                    "random letters and digits, or leave --token out and the agent makes one"
                    % int(code_strength_bits(c.token)))
    for bad, why in ((not 0 <= c.port <= 65535, "--port must be 0-65535 (0: any free port)"),
                     (not 1 <= c.frequency <= 100000, "--frequency must be 1-100000"),
                     (not 1 <= c.duration <= 3600, "--duration must be 1-3600 seconds"),
                     (c.rounds < 1, "--rounds must be at least 1"),
                     (not 0 <= c.offline_max <= 30 * 86400,
                      "--offline-max must be 0-2592000 seconds (0: a lost link ends the run)"),
                     (not 1 <= c.buffer_mb <= 4096, "--buffer-mb must be 1-4096"),
                     (c.pid is not None and c.pid <= 0, "--pid must be positive"),
                     (c.mode == "output" and c.pid is None, "--output needs --pid"),
                     (not 0 <= c.off_cpu_min_us <= 60000000,
                      "--off-cpu-min-us must be 0-60000000 (a minute)"),
                     (c.off_cpu and c.pid is None,
                      "--off-cpu needs --pid: the whole system's scheduler switches are too "
                      "many"),
                     (not 0 <= c.flight_recorder <= 3600,
                      "--flight-recorder must be 1-3600 seconds (0: none)"),
                     (not 0 <= c.after <= 3600, "--after must be 0-3600 seconds"),
                     (not 1 <= c.flight_memory_mb <= 1024, "--flight-memory-mb must be 1-1024")):
        if bad:
            raise usage(why)
    why = check_triggers(c.triggers, c.pid is not None)
    if why:
        raise usage(why)
    if not c.flight_recorder and (any(c.triggers.values()) or "after" in given_names or
                                  "flight-memory-mb" in given_names):
        raise usage("the --trigger-* flags, --after and --flight-memory-mb go with "
                    "--flight-recorder")
    if c.flight_recorder and c.flight_memory_mb > c.buffer_mb:
        raise usage("--flight-memory-mb (%d) past --buffer-mb (%d): a capture's window would "
                    "not fit where the link sends it from" % (c.flight_memory_mb, c.buffer_mb))
    if c.flight_recorder and c.mode == "output":
        raise usage("--flight-recorder sends its captures to a collector (--server or --listen)")
    return c


def main(argv=None):
    try:
        cfg = parse_command_line(sys.argv[1:] if argv is None else argv,
                                 os.environ.get("PERFWIRE_TOKEN"),
                                 os.environ.get("PERFWIRE_ENROLL_TOKEN"))
    except ExitNow as e:
        (sys.stdout if e.code == 0 else sys.stderr).write(e.output)
        return e.code

    stop = threading.Event()
    restart = []

    def request_restart():
        restart.append(True)
        stop.set()

    cfg.request_restart = request_restart

    def on_signal(signum, frame):
        if not stop.is_set():
            log("received %s; stopping" % ("SIGINT" if signum == signal.SIGINT else "SIGTERM"))
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if cfg.flight_recorder:  # a script on the device asks the flight recorder for a capture
        signal.signal(signal.SIGUSR1, lambda signum, frame: FLIGHT_SIGNALLED.set())
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    PROBED.state_dir, PROBED.perf = cfg.state_dir, cfg.perf
    # A perf that is not there: --output fails now, not after a misleading probe; a serving
    # agent says so at once and stays up (the collector's perf check tells the user too).
    if not find_program(cfg.perf):
        log("perf not found: %s (install perf for this kernel, e.g. Debian's linux-perf, or "
            "give --perf PATH)" % cfg.perf)
        if cfg.mode == "output":
            return 1
    try:
        code = run_mode(cfg, stop)
    finally:
        kill_all_children()
    if not restart:
        return code
    # A new version of this script is in place: start it with the same command line.
    exe = cfg.launcher or sys.executable
    log("starting " + SELF)
    try:
        os.execv(exe, [exe, SELF] + cfg.argv)
    except OSError as e:
        log("cannot start the new build (%s); exiting with %d for a supervisor to restart it"
            % (os_message(e), RESTART_EXIT_CODE))
    return RESTART_EXIT_CODE


def run_mode(cfg, stop):
    if cfg.mode == "output":
        return output_mode(cfg, stop)
    compression, problem = choose_compression()
    if compression is None:
        log(problem)
        return 2
    log("compression: " + compression.name)
    if (cfg.tls_pin or cfg.tls_ca or cfg.listen_tls) and \
            (ssl is None or not hasattr(ssl, "MemoryBIO")):
        log("this Python cannot speak TLS (no ssl module, or one older than Python 3.5): it "
            "refuses to run the link in the clear when told to encrypt it")
        return 2
    if cfg.mode == "server":
        if cfg.tls_pin or cfg.tls_ca:
            try:
                cfg.tls_context = tls_client_context(cfg)
            except (ssl.SSLError, OSError) as e:
                log("cannot load the CA file %s: %s" % (cfg.tls_ca, os_message(e)))
                return 2
        return server_mode(cfg, compression, stop)
    return listen_mode(cfg, compression, stop)

if __name__ == "__main__":
    sys.exit(main())
