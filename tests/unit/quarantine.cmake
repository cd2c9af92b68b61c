# The node quarantine rule (scheduler/quarantine.c) alone: a table of cases.
ty_unit_test(test_quarantine ${CMAKE_CURRENT_LIST_DIR}/test_quarantine.c ty_quarantine)
