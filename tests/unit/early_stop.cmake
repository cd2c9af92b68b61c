# Median early stopping's rule (scheduler/early_stop.c) alone: a table of cases.
ty_unit_test(test_early_stop ${CMAKE_CURRENT_LIST_DIR}/test_early_stop.c ty_early_stop)
# scheduler/sweep_stop.c: the rule applied to a stored sweep (facts, verdict, cancel).
ty_unit_test(test_sweep_stop ${CMAKE_CURRENT_LIST_DIR}/test_sweep_stop.c ty_scheduler)
