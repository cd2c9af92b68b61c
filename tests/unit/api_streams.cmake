# api/streams.c: the places of the followed streams, their caps per token and in total, taken
# and given back from many threads; the 429 of api_need_stream_place().
ty_unit_test(test_api_streams ${CMAKE_CURRENT_LIST_DIR}/test_api_streams.c ty_api)
target_link_libraries(test_api_streams PRIVATE Threads::Threads)
