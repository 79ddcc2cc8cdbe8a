"""The methods the lab measures others against, named once: everything outside the methods' own modules reads these
(a test fails on a method's name written out elsewhere: tests/test_layout.py).

A method's name is its key in the methods' table (easd.method.methods); these are kept below that table so that the
settings' default can name one too.
"""

REFERENCE = "sd"  # the comparison's reference: every paired test's other side, the what-if's lane, the page's left lane
SPEED_REFERENCE = "target"  # speed's reference: target-only decoding, which every speed-up divides by
PROPOSED = "easd"  # the method this lab is about: the default of a run, a study, a sweep and the page's right lane
