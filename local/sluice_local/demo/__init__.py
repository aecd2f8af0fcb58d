"""``make demo``: every scenario against one deployed stack, expected vs observed (:mod:`.run`,
:mod:`.report`); the scenarios themselves (:mod:`.scenarios`) also drive the e2e tests."""
