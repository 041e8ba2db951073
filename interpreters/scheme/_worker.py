"""The ag_scheme worker: runs one Scheme agent in GNU Guile, embedded through libguile.

Run by the place as this language's zygote (tacoma/agent/_zygote.py). Guile is started in each
forked worker by `prepare`, before the worker says it is ready (never in the zygote: Guile
starts collector threads, which a fork would not carry), so a meet costs only evaluating
the agent's code, in a fresh module each meet (so a warm worker's next meet finds no
binding of the last).

The agent API (tacoma/agent/_api.py), as Scheme procedures, spelled as __init__.py declares
(the Scheme column of the agent API table, docs/reference/agent-api.md); which procedures
the prelude defines is checked against that table when the zygote starts:
    (bc-folders)                        the folder names
    (bc-folder NAME)                    the folder's elements, a list of bytevectors
    (bc-text NAME)                      the folder's elements decoded from UTF-8
    (bc-append NAME ELEMENT)            append a bytevector (a string is stored as UTF-8)
    (bc-replace NAME ELEMENTS)          replace the folder's elements
    (bc-remove NAME)                    remove the folder
    (bc-read NAME OFFSET [LENGTH])      bytes of the folder's elements joined, a bytevector
                                        (a lazy folder's chunks fetched as needed)
    (bc-folder-size NAME)               the bytes the folder holds (a lazy one's, unfetched)
    (bc-lazy NAME)                      make the folder travel by reference (wire/_lazy.py)
    (meet TARGET [BRIEFCASE] #:async #:timeout)
                                        meet another agent; BRIEFCASE is an alist of folder
                                        name to list of bytevectors; returns such an alist
                                        (sync) or the meet id (async); a failure throws
                                        'tacoma with the error kind and message
    (place-log MESSAGE [LEVEL])         a line in the place's log (`log` is the logarithm)
    (fail MESSAGE)                      end the meet as failed
    (cabinet-read C F), (cabinet-append C F ELEMENT #:private #t),
    (cabinet-replace C F LIST #:private #t), (cabinet-remove C [F]),
    (cabinet-folders C), (cabinets)     the place's cabinets (see tacoma/place/_cabinets.py)
    (place)                             the address of this place
    (principal)                         who launched the meet (a moving agent's trip), as the
                                        place authenticated them; "" if it authenticates nobody
    (go PLACE)                          move to PLACE with the briefcase: the program ends
                                        here and starts again there (tacoma/place/_trips.py)
    (go-next)                           go to the first place of ITINERARY, taken off it;
                                        #f if the itinerary is empty
    (reside NAME)                       stay here as resident agent NAME (_residents.py)
    (receive [SECONDS])                 the next message, an alist with ENVELOPE
                                        (id kind sender principal); #f if none came in
                                        time
    (reply MESSAGE [BRIEFCASE])         answer a request
    (send TARGET [BRIEFCASE])           one-way message to NAME@PLACE; its id
    (send-ack TARGET [BRIEFCASE])       acknowledged message; a handle for wait-ack
    (wait-ack HANDLE [SECONDS])         wait until the message was taken
    (request TARGET [BRIEFCASE] #:timeout S)  a request; the reply

The primitives below take and return only strings, bytevectors and small integers, and
report failures as -1 (with the message in %tacoma-last): a Guile error must not unwind
through the Python frames of a cffi callback. Lists are built by the Scheme prelude.
"""

from __future__ import annotations

from collections.abc import Callable

from tacoma.agent import _zygote as zygote
from tacoma.agent._api import check_bound
from tacoma.agent._channel import AgentChannel, AgentFailure, program_text
from tacoma.wire._briefcase import Briefcase
from tacoma.wire._errors import MeetError
from tacoma.wire._program import program_name
from tacoma.wire._protocol import Meet

from . import interpreter
from ._guile import Guile, ffi, load

PRELUDE = r"""
(use-modules (system vm frame) (rnrs bytevectors))
(define (%check r)
  (if (and (integer? r) (= r -1)) (throw 'tacoma (%tacoma-last-kind) (%tacoma-last)) r))
(define (%folder h name)
  (let loop ((i (- (%check (%tacoma-count h name)) 1)) (acc '()))
    (if (< i 0) acc (loop (- i 1) (cons (%tacoma-ref h name i) acc)))))
(define (%names h)
  (let loop ((i (- (%check (%tacoma-names h)) 1)) (acc '()))
    (if (< i 0) acc (loop (- i 1) (cons (%tacoma-name h i) acc)))))
(define (%alist h) (map (lambda (name) (cons name (%folder h name))) (%names h)))
(define (%as-bytes x) (if (string? x) (string->utf8 x) x))
(define (bc-folders) (%names 0))
(define (bc-folder name) (%folder 0 name))
(define (bc-text name) (map utf8->string (bc-folder name)))
(define (bc-append name element)
  (%check (%tacoma-append 0 name (%as-bytes element))) *unspecified*)
(define (bc-replace name elements)
  (%check (%tacoma-clear 0 name)) (for-each (lambda (e) (bc-append name e)) elements))
(define (bc-remove name) (%check (%tacoma-remove 0 name)) *unspecified*)
(define* (bc-read name offset #:optional length)
  (%check (%tacoma-read 0 name (number->string offset)
                        (if length (number->string length) "-1"))))
(define (bc-folder-size name) (string->number (%check (%tacoma-folder-size 0 name))))
(define (bc-lazy name) (%check (%tacoma-lazy 0 name)) *unspecified*)
(define (%handle briefcase)
  (let ((h (%tacoma-new)))
    (for-each (lambda (folder)
                (%check (%tacoma-clear h (car folder)))
                (for-each (lambda (e) (%check (%tacoma-append h (car folder) (%as-bytes e))))
                          (cdr folder)))
              briefcase)
    h))
(define* (meet target #:optional (briefcase '()) #:key (async #f) (timeout #f))
  (let ((h (%handle briefcase)))
    (let ((r (%check (%tacoma-meet target h (if async "async" "sync")
                                   (if timeout (number->string timeout) "")))))
      (if async (%tacoma-last) (%alist r)))))
(define* (place-log message #:optional (level "info")) (%tacoma-log message level)
  *unspecified*)
(define (fail message) (%tacoma-fail message) (throw 'tacoma-fail message))
(define (place) (%tacoma-place))
(define (principal) (%tacoma-principal))
(define (%cabinet op cabinet . folders)
  (meet "ag_cabinet" (append (list (cons "OP" (list op)))
                             (if cabinet (list (cons "CABINET" (list cabinet))) '())
                             folders)))
(define (%cabinet-write op cabinet folder elements private)
  (apply %cabinet op cabinet (cons folder elements)
         (if private (list (cons "PRIVATE" (list "1"))) '()))
  *unspecified*)
(define (cabinet-read cabinet folder)
  (let ((found (assoc folder (%cabinet "read" cabinet (cons "FOLDER" (list folder))))))
    (if found (cdr found) '())))
(define* (cabinet-append cabinet folder element #:key (private #f))
  (%cabinet-write "append" cabinet folder (list element) private))
(define* (cabinet-replace cabinet folder elements #:key (private #f))
  (%cabinet-write "replace" cabinet folder elements private))
(define* (cabinet-remove cabinet #:optional folder)
  (if folder (%cabinet "remove" cabinet (cons "FOLDER" (list folder)))
      (%cabinet "remove" cabinet))
  *unspecified*)
(define (cabinet-folders cabinet)
  (map utf8->string (cdr (assoc "FOLDERS" (%cabinet "folders" cabinet)))))
(define (cabinets)
  (let ((found (assoc "CABINETS" (%cabinet "list" #f))))
    (if found (map utf8->string (cdr found)) '())))
(define (%flush)
  (force-output (current-output-port)) (force-output (current-error-port)))
;; go and go-next do not return once the agent went: the process ends (see AgentChannel).
(define (go place) (%flush) (%check (%tacoma-go place)))
(define (go-next) (%flush) (%check (%tacoma-go-next)) #f)
(define (%mailbox op . folders)
  (meet "ag_mailbox" (cons (cons "OP" (list op)) folders)))
(define (reside name) (%mailbox "reside" (cons "NAME" (list name))) *unspecified*)
(define* (receive #:optional seconds)
  (let ((m (if seconds
               (%mailbox "receive" (cons "TIMEOUT" (list (number->string seconds))))
               (%mailbox "receive"))))
    (if (assoc "ENVELOPE" m) m #f)))
(define* (reply message #:optional (briefcase '()))
  (apply %mailbox "reply" (cons "ID" (list (cadr (assoc "ENVELOPE" message)))) briefcase)
  *unspecified*)
(define* (send target #:optional (briefcase '())) (meet target briefcase #:async #t))
(define* (send-ack target #:optional (briefcase '()))
  (%check (%tacoma-send-ack target (%handle briefcase))))
(define* (wait-ack handle #:optional seconds)
  (%check (%tacoma-wait-ack handle (if seconds (number->string seconds) ""))) *unspecified*)
(define* (request target #:optional (briefcase '()) #:key (timeout #f))
  (meet target briefcase #:timeout timeout))
(define %prelude (current-module))
(define (%agent-module)
  ;; A fresh module for each meet, seeing the agent API: no binding of an earlier meet of a
  ;; warm worker is left in it.
  (let ((module (make-fresh-user-module)))
    (module-use! module %prelude)
    module))
(define (%run-agent code name)
  ;; Each top-level form is read from a port named after the agent's file and evaluated in
  ;; turn (what eval-string does) in a fresh module, remembering the line where the form
  ;; began. Guile's
  ;; interpreter keeps no source positions in its own frames, so a backtrace of an agent's
  ;; error is the evaluator's machinery (ice-9/eval.scm, boot-9.scm): the agent is told its
  ;; file and the line of the form that raised, and only frames with a source in its own
  ;; file (none, unless it compiled code of its own) are shown.
  (let ((port (open-input-string code)) (line 0) (frames "") (module (%agent-module)))
    (set-port-filename! port name)
    (catch #t
      (lambda ()
        (with-throw-handler #t
          (lambda ()
            (let loop ()
              (let ((form (read port)))
                (unless (eof-object? form)
                  (set! line (+ 1 (or (and (pair? form) (source-property form 'line))
                                      (port-line port))))
                  (eval form module)
                  (loop))))
            "OK")
          (lambda (key . args)
            (unless (eq? key 'tacoma-fail)
              (set! frames (%agent-frames (make-stack #t) name))))))
      (lambda (key . args)
        (cond
          ((eq? key 'tacoma-fail) (string-append "FAIL\n" (car args)))
          (else
            (string-append
              "ERROR\n"
              (call-with-output-string (lambda (p) (print-exception p #f key args)))
              "\n" (if (eq? key 'read-error) ""
                       (string-append "    in the form at " name " line "
                                      (number->string line) "\n"))
              frames)))))))
(define (%agent-frames stack name)
  (let loop ((i 0) (out '()))
    (if (>= i (stack-length stack))
        (apply string-append (reverse out))
        (let* ((frame (stack-ref stack i))
               (source (frame-source frame)))
          (loop (+ i 1)
                (if (and source (pair? (cdr source)) (equal? (cadr source) name))
                    (cons (format #f "    ~a:~a: in ~a\n" name (+ 1 (caddr source))
                                  (or (frame-procedure-name frame) "a lambda"))
                          out)
                    out))))))
"""

#: The procedures the prelude defines for agents (its own helpers, named %..., left out).
DEFINED = frozenset(name for line in PRELUDE.splitlines()
                    if line.startswith(("(define (", "(define* ("))
                    and not (name := line.split()[1].strip("()")).startswith("%"))
check_bound(interpreter.language, interpreter.spellings, DEFINED, interpreter.extras)

_guile: Guile | None = None
_state: _Meet | None = None
_callbacks: list[object] = []  # cffi callbacks must outlive Guile's references to them


class _Meet:
    """What the primitives work on during one meet: briefcases by handle (0: the agent's)."""

    def __init__(self, guile: Guile, bc: Briefcase, channel: AgentChannel) -> None:
        self.guile = guile
        self.channel = channel
        self.briefcases: list[Briefcase] = [bc]
        self.last = ""
        self.last_kind = ""
        self.failure: str | None = None

    def briefcase(self, handle: int) -> Briefcase:
        h = self.guile.to_int(handle)
        if h is None or not 0 <= h < len(self.briefcases):
            raise ValueError("not a briefcase handle")
        return self.briefcases[h]

    def text(self, value: int, what: str) -> str:
        text = self.guile.to_str(value)
        if text is None:
            raise ValueError(f"{what} must be a string")
        return text


def _primitive(arity: int, body: Callable[..., int]) -> object:
    """A Guile primitive whose Python errors come back as -1 with a message, never raised."""
    signature = f"SCM({', '.join(['SCM'] * arity) or 'void'})"

    def call(*args: int) -> int:
        assert _state is not None
        assert _guile is not None
        try:
            return body(_state, *args)
        except MeetError as exc:
            _state.last, _state.last_kind = f"{type(exc).__name__.lstrip('_')}: {exc}", exc.kind
        except Exception as exc:  # noqa: BLE001 - must not escape into Guile
            _state.last, _state.last_kind = f"{type(exc).__name__}: {exc}", "usage"
        return _guile.from_int(-1)

    callback = ffi.callback(signature, call)
    _callbacks.append(callback)
    return callback


def _count(m: _Meet, h: int, name: int) -> int:
    return m.guile.from_int(len(m.briefcase(h).folder(m.text(name, "a folder name"))))


def _ref(m: _Meet, h: int, name: int, i: int) -> int:
    index = m.guile.to_int(i)
    folder = m.briefcase(h).folder(m.text(name, "a folder name"))
    if index is None or not 0 <= index < len(folder):
        raise IndexError("element index out of range")
    return m.guile.bytevector(folder[index])


def _names(m: _Meet, h: int) -> int:
    return m.guile.from_int(len(m.briefcase(h)))


def _name(m: _Meet, h: int, i: int) -> int:
    return m.guile.string(m.briefcase(h).folders()[m.guile.to_int(i) or 0])


def _append(m: _Meet, h: int, name: int, element: int) -> int:
    data = m.guile.to_bytes(element)
    if data is None:
        raise ValueError("folder elements are bytevectors (or strings, stored as UTF-8)")
    m.briefcase(h).append(m.text(name, "a folder name"), data)
    return m.guile.from_int(0)


def _clear(m: _Meet, h: int, name: int) -> int:
    m.briefcase(h)[m.text(name, "a folder name")] = []
    return m.guile.from_int(0)


def _remove(m: _Meet, h: int, name: int) -> int:
    m.briefcase(h).remove(m.text(name, "a folder name"))
    return m.guile.from_int(0)


def _read(m: _Meet, h: int, name: int, offset: int, length: int) -> int:
    size = int(m.text(length, "the length"))
    return m.guile.bytevector(m.briefcase(h).read(m.text(name, "a folder name"),
                                                  int(m.text(offset, "the offset")),
                                                  None if size < 0 else size))


def _folder_size(m: _Meet, h: int, name: int) -> int:
    return m.guile.string(str(m.briefcase(h).folder_size(m.text(name, "a folder name"))))


def _lazy(m: _Meet, h: int, name: int) -> int:
    try:
        m.briefcase(h).lazy(m.text(name, "a folder name"))
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    return m.guile.from_int(0)


def _new(m: _Meet) -> int:
    m.briefcases.append(Briefcase())
    return m.guile.from_int(len(m.briefcases) - 1)


def _meet(m: _Meet, target: int, h: int, mode: int, timeout: int) -> int:
    seconds = m.text(timeout, "the timeout")
    answer = m.channel.meet(m.text(target, "the target"), m.briefcase(h),
                            m.text(mode, "the mode"), float(seconds) if seconds else None)
    if isinstance(answer, str):
        m.last = answer
        return m.guile.from_int(-2)
    m.briefcases.append(answer)
    return m.guile.from_int(len(m.briefcases) - 1)


def _last(m: _Meet) -> int:
    return m.guile.string(m.last)


def _last_kind(m: _Meet) -> int:
    return m.guile.string(m.last_kind)


def _log(m: _Meet, message: int, level: int) -> int:
    m.channel.log(m.text(message, "the message"), m.text(level, "the level"))
    return m.guile.from_int(0)


def _fail(m: _Meet, message: int) -> int:
    m.failure = m.text(message, "the message")
    return m.guile.from_int(0)


def _place(m: _Meet) -> int:
    return m.guile.string(m.channel.place)


def _principal(m: _Meet) -> int:
    return m.guile.string(m.channel.principal)


def _go(m: _Meet, place: int) -> int:
    m.channel.go(m.text(place, "the place"), m.briefcases[0])
    return m.guile.from_int(0)


def _go_next(m: _Meet) -> int:
    return m.guile.from_int(int(m.channel.go_next(m.briefcases[0])))


def _send_ack(m: _Meet, target: int, h: int) -> int:
    return m.guile.from_int(m.channel.send_ack(m.text(target, "the target"), m.briefcase(h)))


def _wait_ack(m: _Meet, handle: int, timeout: int) -> int:
    seconds = m.text(timeout, "the timeout")
    number = m.guile.to_int(handle)
    if number is None:
        raise ValueError("not an acknowledgement handle")
    m.channel.wait_ack(number, float(seconds) if seconds else None)
    return m.guile.from_int(0)


PRIMITIVES: dict[str, tuple[int, Callable[..., int]]] = {
    "%tacoma-count": (2, _count),
    "%tacoma-ref": (3, _ref),
    "%tacoma-names": (1, _names),
    "%tacoma-name": (2, _name),
    "%tacoma-append": (3, _append),
    "%tacoma-clear": (2, _clear),
    "%tacoma-remove": (2, _remove),
    "%tacoma-read": (4, _read),
    "%tacoma-folder-size": (2, _folder_size),
    "%tacoma-lazy": (2, _lazy),
    "%tacoma-new": (0, _new),
    "%tacoma-meet": (4, _meet),
    "%tacoma-last": (0, _last),
    "%tacoma-last-kind": (0, _last_kind),
    "%tacoma-log": (2, _log),
    "%tacoma-fail": (1, _fail),
    "%tacoma-place": (0, _place),
    "%tacoma-principal": (0, _principal),
    "%tacoma-go": (1, _go),
    "%tacoma-go-next": (0, _go_next),
    "%tacoma-send-ack": (2, _send_ack),
    "%tacoma-wait-ack": (2, _wait_ack),
}


def prepare() -> None:
    """Start Guile in this worker and define the agent API (before the meet)."""
    global _guile
    guile = load()
    guile.init()
    for name, (arity, body) in PRIMITIVES.items():
        guile.lib.scm_c_define_gsubr(name.encode(), arity, 0, 0, _primitive(arity, body))
    guile.lib.scm_c_eval_string(b"(begin " + PRELUDE.encode() + b")")
    _guile = guile


def run(meet: Meet, channel: AgentChannel) -> Briefcase:
    global _state
    if _guile is None:
        prepare()
    guile = _guile
    assert guile is not None
    code = program_text(meet, "Scheme")
    _state = _Meet(guile, meet.briefcase, channel)
    guile.lib.scm_c_define(b"%agent-code", guile.string(code))
    guile.lib.scm_c_define(b"%agent-name", guile.string(program_name(meet.briefcase)))
    outcome = guile.to_str(guile.lib.scm_c_eval_string(
        b"(%run-agent %agent-code %agent-name)")) or ""
    status, _, rest = outcome.partition("\n")
    if status == "FAIL":
        raise AgentFailure(rest)
    if status == "ERROR":
        message = rest.partition("\n")[0].strip()
        _, found, after = rest.rpartition("    in the form at ")
        if found:  # "bad.scm line 4": in the one line too
            name, _, line = after.partition("\n")[0].rpartition(" line ")
            message += f" ({name}, line {line})"
        raise AgentFailure(f"Scheme error: {message}", rest.replace("\n\n", "\n"))
    return meet.briefcase


if __name__ == "__main__":
    zygote.main(run, prepare=prepare)
