"""Two profiles compared. Takes a before and an after profile; gives what is compared and whether it is comparable
(comparability), per-phase step and category changes, kernel paths that appeared or vanished, deltas by scope, layer
and rank (diff) and the worded verdict (verdict). Imports ranks/, timeline/ and attribution/.
"""
