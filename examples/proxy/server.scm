;; A server in Scheme: resident as "reverse"; answers each request with its TEXT reversed.
;;   tacoma meet ag_scheme@PLACE --code examples/proxy/server.scm --async --timeout 600
(reside "reverse")
(let loop ()
  (let ((m (receive)))
    (if (assoc "STOP" m)
        (reply m)
        (let ((text (utf8->string (cadr (assoc "TEXT" m)))))
          (reply m (list (cons "TEXT" (list (list->string (reverse (string->list text)))))
                         (cons "BY" (list (string-append "reverse (scheme) at " (place))))))
          (loop)))))
