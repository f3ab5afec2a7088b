"""Pure breakeven maths: the step-time model of speculative decoding under load and what follows.

* :mod:`.model`: the step-time model, speedup, breakeven, inflection, the k schedule.
* :mod:`.speculation`: Leviathan et al.'s batch-one formulas (expected tokens, alpha).
* :mod:`.sweep`: a measured load sweep, checked; :mod:`.fit`: the least-squares fit to it;
  :mod:`.report`: fit plus analysis (intervals, comparisons); :mod:`.schedule_check`: a
  dynamic schedule against never and always speculating.
* :mod:`.tier_costs`: what a serving tier costs per unit of work, and the check of a quoted
  figure against the computed one.
"""
