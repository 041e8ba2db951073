"""The agent's side of the worker channel: what runs inside an agent's process.

A worker is a process forked by its language's zygote (`_zygote`): `serve_one` confines it
(`_sandbox.enter`), says Hello to its place over the socket it was handed, blocks until the
place hands it a Meet, lets the language run the agent, answers with Result or Failed, and
returns; the process then exits. A warm worker (its plan says `reuse`, and its place said
Keep) instead makes itself clean (`_reuse`), says Ready, and serves the next meet the place
hands it: only ever one of the same principal and program. Everything here is
blocking and single-threaded on purpose: an agent is one sequential program, so reads and
writes on the file descriptor it was handed and the sans-IO `Connection` are all it needs.

The agent API (declared in `_api`: meet, log, fail, go, messages, cabinets) is
`AgentChannel`'s methods, each named as its call (Python binds them as they are; the other
languages call them from their own bindings); the briefcase calls are the Briefcase's own
methods. Only the standard library and msgpack are imported here.
"""

from __future__ import annotations

import os
import select
import sys
import time
from collections.abc import Callable

from ..wire._briefcase import (
    CABINET_REQUEST_FOLDERS,
    CODE,
    ENVELOPE,
    ITINERARY,
    TRACE,
    Briefcase,
    attach_lazy,
)
from ..wire._errors import (
    AgentFailed,
    LimitExceeded,
    LocalProtocolError,
    MeetError,
    MeetTimeout,
    ProtocolError,
    error_from_wire,
)
from ..wire._events import encode
from ..wire._lazy import Ref
from ..wire._names import CABINET_AGENT, LAZY_AGENT, MAILBOX_AGENT
from ..wire._program import program_bytes
from ..wire._protocol import (
    NEED_DATA,
    OPEN,
    Accepted,
    Bye,
    Connection,
    Event,
    Failed,
    Keep,
    Log,
    Meet,
    Ready,
    Result,
    Role,
    unsendable,
)
from ..wire._trace import record
from . import _sandbox
from ._reuse import Baseline  # in the zygote's image: a worker imports nothing on its own

__all__ = ["AgentChannel", "AgentFailure", "program_text", "serve_one", "serve_thread"]

#: Acknowledged sends an agent may have outstanding at once.
MAX_UNACKED = 1024
#: Seconds a worker waits, after its meet, for the Keep sent with it (see `kept`).
KEEP_WAIT = 5.0

_READ = 256 * 1024


class AgentFailure(Exception):
    """Ends the meet as failed: raised by `fail`, or by a language runner for an agent error.

    `detail` is the agent's traceback or backtrace as its language wrote it (may be empty);
    `kind` is AgentFailed's, or AgentKilled's where a worker saw its agent's own process
    killed (ag_c runs the agent as a child).
    """

    def __init__(self, message: str, detail: str = "", kind: str = AgentFailed.kind) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.kind = kind


class _NoAnswer(Exception):
    """No answer came before the deadline."""


class AgentChannel:
    """The blocking worker end of the channel to the place, on file descriptor `fd`."""

    #: The agent API's `place`: the address of the place the agent runs at (serve_one sets it).
    place = ""
    #: The agent API's `principal`: the name of the identity that launched the agent's meet
    #: (its trip's, for a moving agent), as its place authenticated it; empty where the
    #: place authenticates nobody (an --insecure place). Set from the meet (serve_one).
    principal = ""

    def __init__(self, fd: int, max_frame: int) -> None:
        self.fd = fd
        self.conn = Connection(Role.WORKER, max_frame)
        self.plan: SandboxPlan | None = None  # the plan this worker entered (serve_one)
        self.gone: str | None = None  # the place the agent went to, once it went
        self._unacked: set[int] = set()  # rids of acknowledged sends not yet waited for
        self.read_at = 0  # perf_counter_ns() after the last read (for traced meets)
        self.trace: list[tuple[str, int]] | None = None  # this meet's steps, if traced
        self._early: dict[int, Event] = {}  # their answers, come while waiting for another
        self.keep = False  # the place keeps this worker warm after its meet (Keep)

    def hello(self) -> None:
        """Tell the place this worker is ready."""
        self._write(self.conn.send(self.conn.hello()))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def _next(self, deadline: float | None = None) -> Event | None:
        """The next event from the place; None if `deadline` (monotonic) passes first."""
        while True:
            event = self.conn.next_event()
            if event is not NEED_DATA:
                assert isinstance(event, Event)
                if isinstance(event, Bye):
                    raise SystemExit(f"place said bye: {event.reason}")
                return event
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    return None
            data = os.read(self.fd, _READ)
            self.read_at = time.perf_counter_ns()
            if not data:
                raise SystemExit("place closed the worker channel")
            self.conn.receive_data(data)

    def wait_meet(self) -> Meet:
        """Block until the place hands over this worker's next meet."""
        while True:
            event = self._next()
            if isinstance(event, Meet):
                return event
            self.keep = self.keep or isinstance(event, Keep)

    def finish(self, event: Result | Failed) -> None:
        """Answer the place's meet: the worker's last word (but a warm one's: `again`)."""
        try:
            data = self.conn.send(event)
        except LimitExceeded as exc:
            data = self.conn.send(unsendable(event, exc, LimitExceeded.kind))
        except LocalProtocolError as exc:  # not encodable: the agent's own failure
            data = self.conn.send(unsendable(event, exc, AgentFailed.kind))
        self._write(data)

    def kept(self) -> bool:
        """Whether the place keeps this worker warm for another meet: it said Keep with the
        meet (the program was met before: see place.workers._warm). The Keep is sent just
        before the Meet, so it has come (a large Meet is encoded on a thread: it comes
        soon); a worker the place does not keep is destroyed by it meanwhile."""
        deadline = time.monotonic() + KEEP_WAIT
        while not self.keep:
            try:
                event = self._next(deadline)
            except SystemExit:  # the place closed the channel: it destroys this worker
                return False
            if event is None:
                break
            self.keep = isinstance(event, Keep)
        kept, self.keep = self.keep, False
        return kept

    def again(self, answer: Result | None = None) -> None:
        """Forget the meet served, and tell the place this worker is clean and waits for
        the next; with the meet's `answer` before it, in one write, if given."""
        self.principal = ""
        self.trace = None
        self._unacked.clear()
        self._early.clear()
        data = self.conn.send(answer) if answer is not None else b""
        self._write(data + self.conn.send(Ready()))

    # -- the agent API
    def meet(self, target: str, briefcase: Briefcase | None = None, mode: str = "sync",
             timeout: float | None = None) -> Briefcase | str:
        """Meet another agent through the place; `target` is `agent` or `agent@HOST:PORT`.

        Sync returns the agent's briefcase; async returns the meet id once accepted.
        Failures raise the same MeetError subclasses the client API raises.
        """
        if mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        return self._answer(self._request(target, briefcase, mode, timeout))

    # -- lazy folders (wire._lazy): the briefcase reads and keeps them through these
    def lazy_fetch(self, ref: Ref, first: int, count: int,
                   manifest: bool) -> tuple[bytes | None, list[bytes]]:
        """Chunks of a lazy folder, from its origin through the place (see place.stores._lazy)."""
        request = Briefcase(OP=[b"fetch"], REF=[ref.pack()], FIRST=[str(first)],
                            COUNT=[str(count)])
        if manifest:
            request["MANIFEST"] = [b"1"]
        answer = self.meet(LAZY_AGENT, request)
        assert isinstance(answer, Briefcase)
        manifests = answer.folder("MANIFEST")
        return (manifests[0] if manifests else None), answer.folder("DATA")

    def lazy_keep(self, name: str, elements: list[bytes]) -> Ref:
        """Have the place keep a folder's data, so that it can travel by reference."""
        answer = self.meet(LAZY_AGENT, Briefcase(OP=[b"keep"], NAME=[name], DATA=elements))
        assert isinstance(answer, Briefcase)
        try:
            return Ref.unpack(answer.folder("REF")[0])
        except (IndexError, ValueError) as exc:
            raise MeetError(f"the place kept folder {name} but answered no reference: "
                            f"{exc}") from None

    def _request(self, target: str, briefcase: Briefcase | None, mode: str,
                 timeout: float | None) -> int:
        """Send a Meet to the place; its request id."""
        if self.gone is not None:
            raise MeetError(f"the agent has gone to {self.gone}: it can do nothing more here")
        # A dict of folders will do, as for the agent's own bc.
        bc = briefcase if isinstance(briefcase, Briefcase) else Briefcase(briefcase or {})
        rid = self.conn.new_rid()
        self._write(self.conn.send(Meet(rid, target, bc, mode, timeout)))  # type: ignore[arg-type]
        return rid

    def _answer(self, rid: int, deadline: float | None = None) -> Briefcase | str:
        """Wait for the answer to request `rid`: a briefcase (Result) or an id (Accepted).

        Answers to acknowledged sends that come meanwhile are kept for `wait_ack`.
        """
        while True:
            event = self._early.pop(rid, None) or self._next(deadline)
            if event is None:
                raise _NoAnswer
            if not isinstance(event, Result | Accepted | Failed):
                self.keep = self.keep or isinstance(event, Keep)  # see `kept`
                continue
            if event.rid != rid:
                if event.rid in self._unacked:
                    self._early[event.rid] = event
                continue
            if isinstance(event, Failed):
                raise error_from_wire(event.kind, event.message, event.detail)
            return event.briefcase if isinstance(event, Result) else event.meet_id

    # -- moving (see tacoma/place/_trips.py)
    def go(self, place: str, briefcase: Briefcase, leave: bool = True) -> None:
        """Move to `place` with `briefcase`: once the next place has the agent (and runs
        its program from the top), this process ends: `go` never returns (with `leave`
        False it does, for a worker whose agent is a child that ends itself: ag_c).
        Raises the next place's error, and the agent stays, if it cannot be taken there."""
        if not place:
            raise ValueError("go needs a place (HOST:PORT)")
        self._answer(self._request(place, briefcase, "go", None))
        self.gone = place
        if leave:
            self.leave()

    def leave(self) -> NoReturn:
        """End this agent's process now: it went on (the place knows; it sends nothing
        back for it). Ending the process, rather than unwinding the program, means no
        `try`, `catch` or `except` in the agent can keep it running here."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.drain()
        os._exit(0)

    def drain(self) -> None:
        """Read what the place sent that nobody will now (a Keep), before this worker ends:
        a Unix socket closed with unread data resets its peer, which may then lose what
        this end wrote last (its answer)."""
        try:
            while select.select([self.fd], [], [], 0)[0]:
                if not os.read(self.fd, _READ):
                    return
        except (OSError, ValueError):
            return

    def go_next(self, briefcase: Briefcase, leave: bool = True) -> bool:
        """Take the first place off the briefcase's ITINERARY and go there. False if the
        itinerary is empty (the trip is over: end, and the briefcase goes home). If that
        place cannot take the agent, raises its error with the place already taken off:
        catch it to skip the place, put it back to retry, or end to go home."""
        stops = briefcase.folder(ITINERARY)
        if not stops:
            return False
        briefcase.replace(ITINERARY, stops[1:])
        self.go(stops[0].decode("utf-8"), briefcase, leave)
        return True  # (only without `leave`: else the process has ended)

    # -- messages (see tacoma/place/_residents.py)
    def _mailbox(self, op: str, **folders: list[bytes | str]) -> Briefcase:
        answer = self.meet(MAILBOX_AGENT, Briefcase(OP=[op], **folders))
        assert isinstance(answer, Briefcase)
        return answer

    def reside(self, name: str) -> None:
        """Stay at this place as the resident agent `name`: meets with `name@place` are
        now messages to this agent, waiting in its mailbox."""
        self._mailbox("reside", NAME=[name])

    def receive(self, timeout: float | None = None) -> Briefcase | None:
        """The next message (its folders, and ENVELOPE: [id, kind, sender, principal]),
        waiting up to `timeout` seconds (None: until the meet ends); None if none came."""
        folders: dict[str, list[bytes | str]] = {}
        if timeout is not None:
            folders["TIMEOUT"] = [repr(float(timeout))]
        message = self._mailbox("receive", **folders)
        return message if message.folder(ENVELOPE) else None

    def reply(self, message: Briefcase, briefcase: Briefcase | None = None) -> None:
        """Answer a request (a message of kind `request`, as `receive` returned it)."""
        envelope = message.folder(ENVELOPE)
        if not envelope:
            raise ValueError("reply takes a message as receive returned it (with ENVELOPE)")
        answer = Briefcase(briefcase or Briefcase())
        for name in ("OP", "ID"):
            if name in answer:
                raise ValueError(f"a reply cannot have a folder named {name}")
        answer["OP"] = [b"reply"]
        answer["ID"] = [envelope[0]]
        result = self.meet(MAILBOX_AGENT, answer)
        assert isinstance(result, Briefcase)

    def send(self, target: str, briefcase: Briefcase | None = None) -> str:
        """One-way message to the resident `name@place`; its id once it is in the mailbox."""
        return str(self.meet(target, briefcase, "async"))

    def send_ack(self, target: str, briefcase: Briefcase | None = None) -> int:
        """Send a message whose acknowledgement comes later: a handle for `wait_ack`."""
        if len(self._unacked) >= MAX_UNACKED:
            raise ValueError(f"{MAX_UNACKED} acknowledged sends are outstanding: "
                             "wait_ack some before sending more")
        rid = self._request(target, briefcase, "ack", None)
        self._unacked.add(rid)
        return rid

    def wait_ack(self, handle: int, timeout: float | None = None) -> None:
        """Wait until the message of `send_ack` was taken by its resident; raises its error
        (MailboxFull, UnknownAgent, MessageError) or MeetTimeout after `timeout` seconds."""
        if handle not in self._unacked:
            raise ValueError(f"no acknowledged send {handle} is outstanding")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._answer(handle, deadline)
        except _NoAnswer:  # still outstanding: it may be waited for again
            raise MeetTimeout(f"no acknowledgement within {timeout} s") from None
        except MeetError:
            self._unacked.discard(handle)
            raise
        self._unacked.discard(handle)

    def request(self, target: str, briefcase: Briefcase | None = None,
                timeout: float | None = None) -> Briefcase:
        """Send a request to the resident `name@place` and wait for its reply."""
        answer = self.meet(target, briefcase, "sync", timeout)
        assert isinstance(answer, Briefcase)
        return answer

    def log(self, message: str, level: str = "info") -> None:
        """Write a line to the place's log."""
        self._write(self.conn.send(Log(level, str(message))))

    # -- cabinets: the place's own folders, through its ag_cabinet agent
    # (see place.stores._cabinets)
    def _cabinet(self, op: str, cabinet: str | None = None,
                 folders: dict[str, list[bytes | str]] | None = None) -> Briefcase:
        request = Briefcase(OP=[op])
        if cabinet is not None:
            request["CABINET"] = [cabinet]
        for name, elements in (folders or {}).items():
            request.replace(name, elements)
        answer = self.meet(CABINET_AGENT, request)
        assert isinstance(answer, Briefcase)
        return answer

    def _cabinet_write(self, op: str, cabinet: str, folder: str, elements: list[bytes | str],
                       private: bool) -> None:
        if folder in CABINET_REQUEST_FOLDERS:
            raise ValueError(f"a cabinet folder cannot be named {folder}")
        self._cabinet(op, cabinet, {folder: elements, **({"PRIVATE": [b"1"]} if private else {})})

    def cabinet_read(self, cabinet: str, folder: str) -> list[bytes]:
        """A folder of a cabinet at this place (empty if it has none)."""
        return self._cabinet("read", cabinet, {"FOLDER": [folder]}).folder(folder)

    def cabinet_append(self, cabinet: str, folder: str, *elements: bytes | str,
                       private: bool = False) -> None:
        """Append to a cabinet's folder (str as UTF-8), creating the cabinet (private: only
        this agent may use it) if it does not exist."""
        self._cabinet_write("append", cabinet, folder, list(elements), private)

    def cabinet_replace(self, cabinet: str, folder: str, elements: list[bytes | str],
                        private: bool = False) -> None:
        """Replace a cabinet's folder, creating the cabinet if it does not exist."""
        self._cabinet_write("replace", cabinet, folder, list(elements), private)

    def cabinet_remove(self, cabinet: str, folder: str | None = None) -> None:
        """Remove a folder of a cabinet, or the whole cabinet."""
        if folder is None:
            self._cabinet("remove", cabinet)
        else:
            self._cabinet("remove", cabinet, {"FOLDER": [folder]})

    def cabinet_folders(self, cabinet: str) -> list[str]:
        """The names of a cabinet's folders."""
        return self._cabinet("folders", cabinet).text("FOLDERS")

    def cabinets(self) -> list[str]:
        """The cabinets at this place this agent may use."""
        return self._cabinet("list").text("CABINETS")

    @staticmethod
    def fail(message: str) -> None:
        """End the meet now as failed, with `message` and no traceback."""
        raise AgentFailure(message)


Runner = Callable[[Meet, AgentChannel], Briefcase]

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from ._plan import SandboxPlan


def program_text(meet: Meet, language: str) -> str:
    """The agent's source: the CODE folder's elements joined by newlines, as UTF-8 text.

    Raises AgentFailure, saying what is wrong, if there is none or it is not UTF-8.
    """
    if not meet.briefcase.folder(CODE):
        raise AgentFailure(f"{meet.agent} needs its {language} program in the CODE folder "
                           f"(tacoma meet {meet.agent} --code FILE)")
    try:
        return program_bytes(meet.briefcase).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentFailure(f"the CODE folder is not UTF-8 {language} source: {exc}") from None


def _warm_up(run: Runner, channel: AgentChannel, meet: Meet) -> None:
    """Take one dummy meet through decode, `run` and encode, before the real one comes.

    A new process runs every code path for the first time: page faults on the
    interpreter's code, caches filled, lazy imports done. That costs about a millisecond,
    and doing it here takes it off the critical path of the meet this worker will serve.
    """
    scratch = Connection(Role.HOST)
    frame = encode(meet)
    scratch.receive_data(len(frame).to_bytes(4, "big") + frame)
    scratch.their_state = OPEN  # as if the dummy meet came after a Hello
    event = scratch.next_event()
    assert isinstance(event, Meet)
    result = run(event, channel)
    encode(Result(0, result))


def warm_up(run: Runner, meet: Meet) -> None:
    """Run `_warm_up` with a channel that is not connected (the dummy meet never uses it)."""
    _warm_up(run, AgentChannel(-1, 1 << 20), meet)


def _open(plan: SandboxPlan, this_thread: bool = False) -> AgentChannel:
    """The worker's channel on `plan.fd`, through which this process (or, `this_thread`,
    this thread) reads lazy folders."""
    channel = AgentChannel(plan.fd, plan.max_frame)
    channel.place = plan.place
    channel.plan = plan
    attach_lazy(channel.lazy_fetch, channel.lazy_keep, plan.prefetch, this_thread)
    return channel


def serve_one(run: Runner, plan: SandboxPlan,
              prepare: Callable[[], None] | None = None,
              warm: Meet | None = None,
              reset: Callable[[], None] | None = None,
              instances: bool = False) -> None:
    """Confine this process as `plan` says, serve one meet with `run` (more, where the plan
    says `reuse`), and return.

    `run` returns the result briefcase or raises AgentFailure (a message and the agent's
    traceback) or any exception (a bug, reported with its traceback). `prepare`, if given,
    runs once confined and before the worker says it is ready: the place for a language to
    start its interpreter off the meet's critical path.

    `warm`, if given, is the zygote's warm-up meet, taken through `run` again here when the
    place started this worker ahead of its meet (a pool's, `plan.ahead`): a forked
    worker shares its zygote's pages until it writes to them, and CPython writes to every
    object it touches (reference counts, the type cache, frames), so a first meet would
    take hundreds of copy-on-write page faults on its critical path. Taken here, they are
    off it. A worker started for a meet that waits for it skips this: there it would only
    add to the wait.

    A worker whose plan says `reuse` goes on after a meet whose agent ended well (a Result,
    and it did not move on) if its place said Keep with the meet: `_reuse.Baseline.clean`,
    then `reset`
    (the language's fresh interpreter state, if it has one to make), then Ready, and it
    waits for the next meet; one that is not kept (its channel closes), or cannot be made
    clean, returns instead.

    `instances`: the language runs each meet in a fresh instance of its own runtime, which
    is what makes meets of one principal safe from each other in this process; the agent
    reaches no process, file, descriptor or environment of it. A warm worker then only
    renews its next meet's CPU time limit and output file (`Baseline.renew`), and sends
    its Ready with its answer, in one write.
    """
    _sandbox.enter(plan)
    if prepare is not None:
        prepare()
    if warm is not None and plan.ahead:
        warm_up(run, warm)
    os.set_inheritable(plan.fd, False)  # the agent's own children do not get it
    channel = _open(plan)
    baseline = Baseline(plan) if plan.reuse else None
    channel.hello()
    while True:
        try:
            meet = channel.wait_meet()
        except ProtocolError as exc:
            raise SystemExit(f"tacoma worker: protocol error from place: {exc}") from None
        reply = _serve(run, channel, meet)
        sys.stdout.flush()
        sys.stderr.flush()
        if (instances and baseline is not None and channel.keep and channel.gone is None
                and isinstance(reply, Result)):  # told Keep with its meet: see `kept`
            channel.keep = False
            if not baseline.renew():  # its life's CPU time spent: the place destroys it
                channel.finish(reply)
                channel.drain()
                return
            channel.again(reply)
            del meet, reply
            continue
        channel.finish(reply)
        if baseline is None or not isinstance(reply, Result) or channel.gone is not None:
            channel.drain()
            return
        del meet, reply  # nothing of the meet stays referenced here
        if not channel.kept():
            return  # not to be kept: the place destroys it
        unclean = baseline.clean()
        if unclean is not None:  # the place destroys it, and says why in its debug log
            channel.log(f"worker not reused: {unclean}", "debug")
            channel.drain()
            return
        if reset is not None:  # after: a new interpreter reads the environment made clean
            reset()
        channel.again()


def serve_thread(run: Runner, plan: SandboxPlan) -> None:
    """Serve meets with `run` on this thread of the place, over the socket `plan.fd`, until
    the place closes it or keeps it no more; the place's own process, unconfined: only for a
    language that runs each meet in a fresh instance of its runtime (`Interpreter.in_place`),
    on a place that runs instances in its own process.

    As `serve_one` without the sandbox: nothing to enter, and between meets nothing to make
    clean (the instance went with its meet; the runner bounds each meet's CPU time from
    the thread's own clock). Lazy folders are read through this thread's channel."""
    channel = _open(plan, this_thread=True)
    try:
        channel.hello()
        while True:
            meet = channel.wait_meet()
            reply = _serve(run, channel, meet)
            if (plan.reuse and channel.keep and channel.gone is None
                    and isinstance(reply, Result)):
                channel.keep = False
                channel.again(reply)
                del meet, reply
                continue
            channel.finish(reply)
            channel.drain()
            return
    except (SystemExit, OSError, ProtocolError):
        return  # the place closed the channel, or broke it: it destroys this worker
    finally:
        attach_lazy(None, None, this_thread=True)


def _serve(run: Runner, channel: AgentChannel, meet: Meet) -> Result | Failed:
    """Run one meet's agent: its Result, or Failed saying why it failed."""
    channel.principal = meet.principal
    if TRACE in meet.briefcase:  # a traced meet: the worker's steps go into its result
        decoded = time.perf_counter_ns()
        meet.briefcase.remove(TRACE)
        channel.trace = [("receive and unmarshal", decoded - channel.read_at)]
    try:
        started = time.perf_counter_ns() if channel.trace is not None else 0
        reply: Result | Failed = Result(meet.rid, run(meet, channel))
        if channel.trace is not None and isinstance(reply, Result):
            spent = time.perf_counter_ns() - started
            start = sum(ns for step, ns in channel.trace if step == "start")
            steps = [s for s in channel.trace if s[0] != "start"]
            record(reply.briefcase, "worker",
                   [*steps, ("start", start), ("run", spent - start)])
    except AgentFailure as exc:
        reply = Failed(meet.rid, exc.kind, exc.message or "agent failed", exc.detail)
    except Exception as exc:  # noqa: BLE001 - a runner bug: still answer the meet
        import traceback

        reply = Failed(meet.rid, AgentFailed.kind, f"{type(exc).__name__}: {exc}",
                       traceback.format_exc())
    return reply
