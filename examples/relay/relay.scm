;; The relay, third leg (Scheme): add to TRAIL, meet the C leg, take its TRAIL back.
(bc-append "TRAIL" (string-append "scheme at " (place)))
(define after (meet "ag_c" (list (cons "CODE" (bc-folder "C"))
                                 (cons "TRAIL" (bc-folder "TRAIL")))))
(bc-replace "TRAIL" (cdr (assoc "TRAIL" after)))
