# test_pytorch_ddp: examples/pytorch-ddp (PyTorch DDP, gloo, 2 ranks in the local backend's
# sandbox, a subset of Fashion-MNIST) survives a rank killed mid-way: the gang restarts, resumes
# from its checkpoint, succeeds, and its loss series is in the metrics API; a SIGTERM makes
# train.py checkpoint and exit 75, and its next run resumes. pytest on Debian's
# Python 3 with python3-torch, with the fixture of clients/python/tests (a real trainyard serve).
add_test(NAME test_pytorch_ddp
         COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider
                 ${CMAKE_CURRENT_LIST_DIR}/test_pytorch_ddp.py
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(test_pytorch_ddp PROPERTIES
    LABELS "integration;pytorch" TIMEOUT 900
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/clients/python;TRAINYARD_BIN_DIR=${CMAKE_BINARY_DIR}/bin;PYTHONDONTWRITEBYTECODE=1")
