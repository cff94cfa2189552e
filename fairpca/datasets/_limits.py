"""The screening's limits, in a module of their own: the audit's config (and its command
line's ``--help``) shows them as defaults without importing pandas."""

# Categories of fewer training rows are pooled: a one-hot column of a handful of rows would
# let the fitted encoder (and the logged model) name those rows' values.
MIN_CATEGORY_COUNT = 30
# One feature alone predicting the label this well leaks it: the best single features of the
# bundled Adult, German and Bank data reach 0.68-0.76; COMPAS's outcome columns (is_recid,
# the survival time `end`, `event`, `r_days_from_arrest`) reach 0.82-0.97.
LEAKAGE_BALANCED_ACCURACY = 0.80
# One feature alone predicting a sensitive attribute this well is its proxy: a linear
# constraint on the group means cannot remove what a non-linear model reads back from it.
PROXY_BALANCED_ACCURACY = 0.95
