;; A first Scheme agent: greets every name in the NAME folder.
;;
;;   tacoma meet ag_scheme --code examples/hello/hello.scm -f NAME=world
;;
;; Folder elements are bytevectors; bc-text decodes UTF-8, bc-append stores strings as UTF-8.
(for-each (lambda (name)
            (bc-append "GREETING" (string-append "hello, " name " from scheme")))
          (bc-text "NAME"))
