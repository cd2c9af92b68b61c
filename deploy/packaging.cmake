# Installing Trainyard and its Debian packages.
#
#   cmake --install build [--prefix /usr]          the files below, under the prefix
#   (cd build && cpack -G DEB)                     three .deb files in build/, for /usr
#
# Components, one Debian package each:
#   server  -> trainyard          bin/trainyard (server and CLI), the systemd unit, the
#                                 defaults file, README and examples; postinst creates the
#                                 system user trainyard and /var/lib/trainyard
#   worker  -> trainyard-worker   bin/trainyard-worker and, with the CUDA path,
#                                 lib/trainyard/libty_gpu.so (runtime/CMakeLists.txt)
#   python  -> python3-trainyard  clients/python/trainyard in lib/python3/dist-packages, the
#                                 PyTorch DDP example in share/trainyard/examples/pytorch-ddp
#
# With the prefix /usr the defaults file goes to /etc/default/trainyard, else to
# <prefix>/etc/default/trainyard; the unit's ExecStart and EnvironmentFile name the
# installed paths. The unit (deploy/systemd/trainyard.service) is written for /usr.

set(TRAINYARD_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python package goes, relative to the prefix (Debian's python3 reads /usr/lib/python3/dist-packages)")

install(DIRECTORY ${PROJECT_SOURCE_DIR}/clients/python/trainyard
        DESTINATION ${TRAINYARD_PYTHON_DIR} COMPONENT python
        PATTERN __pycache__ EXCLUDE
        PATTERN "*.pyc" EXCLUDE)

# The PyTorch DDP example: its job file runs /usr/share/trainyard/examples/pytorch-ddp/train.py.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/pytorch-ddp
        DESTINATION ${CMAKE_INSTALL_DATADIR}/trainyard/examples COMPONENT python
        PATTERN __pycache__ EXCLUDE
        PATTERN "*.pyc" EXCLUDE)

install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/DESIGN.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/trainyard COMPONENT server)
install(FILES ${PROJECT_SOURCE_DIR}/examples/fmnist.yaml ${PROJECT_SOURCE_DIR}/examples/lr-sweep.yaml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/trainyard/examples COMPONENT server)

# The unit and the defaults file; their paths are known only when installing (cpack
# installs with the prefix /usr into a staging DESTDIR).
install(CODE "set(TY_UNIT_SRC \"${PROJECT_SOURCE_DIR}/deploy/systemd/trainyard.service\")
set(TY_DEFAULT_SRC \"${PROJECT_SOURCE_DIR}/deploy/systemd/trainyard.default\")
set(TY_STAGE \"${PROJECT_BINARY_DIR}/deploy\")" COMPONENT server)
install(CODE [[
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(ty_etc /etc)
  else()
    set(ty_etc "${CMAKE_INSTALL_PREFIX}/etc")
  endif()
  file(READ "${TY_UNIT_SRC}" ty_unit)
  string(REPLACE "/usr/bin/trainyard" "${CMAKE_INSTALL_PREFIX}/bin/trainyard" ty_unit "${ty_unit}")
  string(REPLACE "/etc/default/trainyard" "${ty_etc}/default/trainyard" ty_unit "${ty_unit}")
  file(WRITE "${TY_STAGE}/trainyard.service" "${ty_unit}")
  file(INSTALL "${TY_STAGE}/trainyard.service"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  file(INSTALL "${TY_DEFAULT_SRC}" DESTINATION "${ty_etc}/default" RENAME trainyard
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
]] COMPONENT server)

# ---- cpack -G DEB ----------------------------------------------------------------
set(CPACK_PACKAGE_NAME trainyard)
set(CPACK_PACKAGE_VENDOR "Trainyard")
set(CPACK_PACKAGE_CONTACT "Trainyard maintainers <trainyard@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
# Installed with the prefix /usr into a DESTDIR, so that /etc is /etc (see above).
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_COMPONENTS_ALL server worker python)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME trainyard)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION net)
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS
    "libc6, libmicrohttpd12, libjansson4, libsqlite3-0, libcurl4, libssl3, libyaml-0-2, bubblewrap, util-linux, passwd")
set(CPACK_DEBIAN_SERVER_PACKAGE_RECOMMENDS "trainyard-worker, curl, jq")
set(CPACK_DEBIAN_SERVER_PACKAGE_SUGGESTS "python3-trainyard")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/deploy/debian/trainyard/postinst;${PROJECT_SOURCE_DIR}/deploy/debian/trainyard/prerm;${PROJECT_SOURCE_DIR}/deploy/debian/trainyard/postrm;${PROJECT_SOURCE_DIR}/deploy/debian/trainyard/conffiles")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_SERVER_DESCRIPTION
    "job-submission service for distributed training: server and command line\nUsers submit training jobs over a REST API; the server stores them in SQLite, admits them by team quota, queue and priority, runs each job's ranks as a gang (locally in bubblewrap sandboxes, or on Kubernetes) and serves status, logs, metrics and a web page. The same binary is the command-line client. The service runs from /var/lib/trainyard; its settings are in /etc/default/trainyard.")

set(CPACK_DEBIAN_WORKER_PACKAGE_NAME trainyard-worker)
set(CPACK_DEBIAN_WORKER_PACKAGE_SECTION science)
set(CPACK_DEBIAN_WORKER_PACKAGE_DEPENDS "libc6, libopenblas0, libjansson4, libcurl4, libssl3, zlib1g")
set(CPACK_DEBIAN_WORKER_PACKAGE_SUGGESTS "dataset-fashion-mnist")
if(TARGET ty_gpu)
  # libty_gpu.so is linked, not loaded on demand: this build starts only where the CUDA
  # libraries it was built with are on the library path.
  set(ty_worker_gpu "This build has the GPU path (/usr/lib/trainyard/libty_gpu.so): it needs the cuBLAS and NCCL of CUDA ${TY_RUNTIME_CUDA_VERSION} on the library path to start at all, from NVIDIA's CUDA packages (not Debian's); build with -DTRAINYARD_CUDA=OFF for machines without them.")
else()
  set(ty_worker_gpu "This build has no GPU path (built without CUDA).")
endif()
set(CPACK_DEBIAN_WORKER_DESCRIPTION
    "Trainyard's data-parallel trainer\ntrainyard-worker trains on Fashion-MNIST or MNIST across the ranks of a Trainyard job: OpenBLAS and a TCP ring on CPU, cuBLAS and NCCL on GPU.\n.\n${ty_worker_gpu}")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-trainyard)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, python3-requests, python3-yaml")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-torch, python3-optuna")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/deploy/debian/python3-trainyard/prerm")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
    "Python client of Trainyard\nimport trainyard: a client of the Trainyard API, and trainyard.report() for training code that reports its metrics from a Trainyard job. The PyTorch DDP example is in /usr/share/trainyard/examples/pytorch-ddp.")

include(CPack)
