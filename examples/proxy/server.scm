;; A server in Scheme: resident as "reverse"; answers each request with its TEXT reversed.
;; A one-way message with REPLY_TO (forwarded, the Forwarding pattern) is answered by a
;; one-way message straight to REPLY_TO, not through the proxy.
;;   tacoma meet ag_scheme@PLACE --code examples/proxy/server.scm --async --timeout 600
(define (folder m name) (cdr (assoc name m)))
(reside "reverse")
(let loop ()
  (let ((m (receive)))
    (cond
      ((not m) #t)
      ((assoc "STOP" m) (reply m))
      (else
       (let* ((text (utf8->string (car (folder m "TEXT"))))
              (answer (list (cons "TEXT" (list (list->string (reverse (string->list text)))))
                            (cons "BY" (list (string-append "reverse (scheme) at " (place)))))))
         (if (equal? (utf8->string (cadr (folder m "ENVELOPE"))) "request")
             (reply m answer)
             (send (utf8->string (car (folder m "REPLY_TO"))) answer))
         (loop))))))
