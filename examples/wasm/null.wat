;; The null agent, by hand in WebAssembly's text format: a module whose `_start` does
;; nothing. The place takes a module (or its WAT) as it is, with no build: it compiles it on
;; the first meet and runs each meet in a fresh instance. It imports nothing, not even WASI,
;; and exports no memory, so it makes no tacoma.h call: its briefcase comes back as it went.
;;
;;   tacoma meet ag_wasm --code examples/wasm/null.wat -f NAME=world
;;
;; (python examples/wasm/run.py sends it too, after the roamer.)
(module
  (func (export "_start")))
