# api/feed.c and api/events.c: the fan-out of the live event streams and the streams over it,
# read through their read() against a real store.
ty_unit_test(test_api_feed ${CMAKE_CURRENT_LIST_DIR}/test_api_feed.c ty_api)
# calloc's failure is injected (test_failed_allocation_gives_the_place_back): ty_api's calls of
# calloc go through the test's __wrap_calloc.
target_link_options(test_api_feed PRIVATE -Wl,--wrap=calloc)
