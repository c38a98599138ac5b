# Finds the installed torch wheel and its bundled pybind11 *without importing torch*
# (importing it would run the torch.backends entry point, i.e. load a
# possibly half-built torch_openreg), and exposes them as imported targets
# that every component links:
#
#   openreg::torch         torch's C++ headers and libtorch, libtorch_cpu,
#                          libc10, with the wheel's ABI settings
#   openreg::torch_python  openreg::torch plus libtorch_python
#
# and four functions:
#   openreg_pybind11_module(<name> <sources>...)  a torch-free pybind11 module
#       (torch's bundled pybind11 headers only)
#   openreg_torch_python_module(<name> <sources>...)  a pybind11 module built
#       against torch's bundled pybind11 headers, so that objects (tensors,
#       c10d.Store, ...) cross between it and torch's own bindings
#   openreg_forbid_torch(<target>)  fails the configure step if a torch-free
#       library (the runtime, the collectives core) reaches torch
#   openreg_unity_build(<target> <batch>)  compiles a glue library's sources
#       <batch> per translation unit (option OPENREG_UNITY_BUILD, default ON)
include_guard(GLOBAL)

find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)

execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
    "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
  OUTPUT_VARIABLE TORCH_DIR OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
# pybind11: the headers torch bundles, whatever their version (never a pin of
# our own). A module built against another pybind11 internals version cannot
# exchange objects with torch's bindings (c10d.Store, tensors). The torch-free
# test modules get the same headers through a directory that holds only them
# (so openreg_forbid_torch still sees no torch include path).
set(OPENREG_PYBIND11_HEADER ${TORCH_DIR}/include/pybind11/detail/common.h)
if(NOT EXISTS ${OPENREG_PYBIND11_HEADER})
  message(FATAL_ERROR "torch at ${TORCH_DIR} bundles no pybind11 headers (${OPENREG_PYBIND11_HEADER})")
endif()
file(STRINGS ${OPENREG_PYBIND11_HEADER} _pyb_lines REGEX "^#define PYBIND11_VERSION_(MAJOR|MINOR|PATCH) ")
set(OPENREG_PYBIND11_VERSION "")
foreach(part MAJOR MINOR PATCH)
  foreach(line IN LISTS _pyb_lines)
    if(line MATCHES "^#define PYBIND11_VERSION_${part} +([0-9A-Za-z.]+)")
      list(APPEND OPENREG_PYBIND11_VERSION ${CMAKE_MATCH_1})
    endif()
  endforeach()
endforeach()
list(JOIN OPENREG_PYBIND11_VERSION "." OPENREG_PYBIND11_VERSION)
message(STATUS "OpenReg: torch at ${TORCH_DIR}, its bundled pybind11 ${OPENREG_PYBIND11_VERSION}")
set(OPENREG_PYBIND11_INCLUDE ${CMAKE_BINARY_DIR}/pybind11-from-torch)
file(MAKE_DIRECTORY ${OPENREG_PYBIND11_INCLUDE})
file(CREATE_LINK ${TORCH_DIR}/include/pybind11 ${OPENREG_PYBIND11_INCLUDE}/pybind11 SYMBOLIC)

set(TORCH_LIB_DIR ${TORCH_DIR}/lib)
foreach(lib torch torch_cpu c10 torch_python)
  string(TOUPPER ${lib} LIBVAR)
  find_library(OPENREG_${LIBVAR}_LIB ${lib} PATHS ${TORCH_LIB_DIR} NO_DEFAULT_PATH REQUIRED)
endforeach()

add_library(openreg::torch INTERFACE IMPORTED GLOBAL)
target_include_directories(openreg::torch SYSTEM INTERFACE
  ${TORCH_DIR}/include
  ${TORCH_DIR}/include/torch/csrc/api/include)
# The wheel is built with the C++11 ABI; a mismatch fails at load time with
# undefined std::string symbols.
target_compile_definitions(openreg::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_link_libraries(openreg::torch INTERFACE
  ${OPENREG_TORCH_LIB} ${OPENREG_TORCH_CPU_LIB} ${OPENREG_C10_LIB})

add_library(openreg::torch_python INTERFACE IMPORTED GLOBAL)
target_link_libraries(openreg::torch_python INTERFACE openreg::torch ${OPENREG_TORCH_PYTHON_LIB})

# A Python extension module on pybind11 (torch's headers, see above): what
# pybind11_add_module does that matters here (the interpreter's suffix, no
# libpython link, hidden symbols so two modules' pybind11 copies never merge).
function(openreg_pybind11_module name)
  Python3_add_library(${name} MODULE WITH_SOABI ${ARGN})
  target_include_directories(${name} SYSTEM PRIVATE ${OPENREG_PYBIND11_INCLUDE})
  set_target_properties(${name} PROPERTIES CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON)
endfunction()

function(openreg_torch_python_module name)
  openreg_pybind11_module(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE openreg::torch_python)
endfunction()

# Relative rpath from an installed torch_openreg/lib/ to site-packages/torch/lib.
set(OPENREG_TORCH_RPATH "$ORIGIN/../../torch/lib")

function(openreg_forbid_torch target)
  # Checked at generate time over the target's direct settings and its
  # direct link libraries' interface include directories.
  get_target_property(incs ${target} INCLUDE_DIRECTORIES)
  get_target_property(libs ${target} LINK_LIBRARIES)
  foreach(item IN LISTS incs libs)
    if(item MATCHES "openreg::torch" OR item MATCHES "^${TORCH_DIR}" OR item MATCHES "torch_openreg$")
      message(FATAL_ERROR "${target} must not depend on torch (found '${item}'): "
                          "it is the part a vendor replaces and stays torch-free")
    endif()
    if(TARGET ${item})
      get_target_property(iincs ${item} INTERFACE_INCLUDE_DIRECTORIES)
      foreach(inc IN LISTS iincs)
        if(inc MATCHES "^${TORCH_DIR}")
          message(FATAL_ERROR "${target} reaches torch headers through ${item}")
        endif()
      endforeach()
    endif()
  endforeach()
endfunction()

# Unity builds for the libraries that include torch's headers (docs/building.md,
# "The build in one command"): most of a glue file's compile is torch's headers,
# so the files are compiled in batches of <batch> per translation unit. The
# batches' #include lines are relative to the tree (UNITY_BUILD_RELOCATABLE),
# so ccache still hits from a clone in another folder.
option(OPENREG_UNITY_BUILD "compile the torch glue's sources in batches" ON)
function(openreg_unity_build target batch)
  if(OPENREG_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
      UNITY_BUILD_BATCH_SIZE ${batch} UNITY_BUILD_RELOCATABLE ON)
  endif()
endfunction()
