# deploy/: the manifests against the Kubernetes v1.26 schemas, RBAC, the Deployment's flags
# against the built `trainyard serve --help`, the eksctl cluster's node groups.
ty_unit_test(test_deploy ${CMAKE_CURRENT_LIST_DIR}/test_deploy.c ty_test_support)
add_dependencies(test_deploy trainyard)
target_compile_definitions(test_deploy PRIVATE
  TY_DEPLOY_DIR="${PROJECT_SOURCE_DIR}/deploy"
  TY_K8S_OPENAPI_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/kubernetes-openapi"
  TY_TRAINYARD_BIN="$<TARGET_FILE:trainyard>")
