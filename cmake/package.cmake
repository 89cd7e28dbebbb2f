# The Debian package (-DPERFWIRE_PACKAGE=ON, then `cpack` in the build folder; scripts/package.sh builds it and
# test/package/package_test.sh checks it). It holds the collector, the agent and the demo in
# /usr/bin, their man pages (help2man, from --help), the systemd units, a default collector
# configuration, the Python agent, and the static agents of every architecture that
# scripts/build-agents.sh left in dist/ (offered by the collector from /usr/lib/perfwire/agents).
include(GNUInstallDirs)
install(TARGETS perfwire-demo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(package_dir ${CMAKE_BINARY_DIR}/package)
set(PERFWIRE_MAINTAINER "perfwire developers <maintainers@perfwire.dev>"
    CACHE STRING "The Maintainer of the Debian package")

# The units of docs/systemd, pointed at /usr/bin.
foreach(unit perfwire-collector perfwire-agent)
    file(READ ${PROJECT_SOURCE_DIR}/docs/systemd/${unit}.service text)
    string(REPLACE "/usr/local/bin/" "/usr/bin/" text "${text}")
    string(REGEX REPLACE "# Install: [^\n]*\n" "" text "${text}")
    file(WRITE ${package_dir}/${unit}.service "${text}")
    install(FILES ${package_dir}/${unit}.service DESTINATION /lib/systemd/system)
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/packaging/perfwire-collector.default
        DESTINATION /etc/default RENAME perfwire-collector)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/perfwire-agent.default.example
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
install(FILES ${PROJECT_SOURCE_DIR}/src/agent/python/perfwire_agent.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/perfwire)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME perfwire
       )
install(FILES ${PROJECT_SOURCE_DIR}/packaging/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR}
       )

# The static agents found at configure time (scripts/package.sh configures after building them).
file(GLOB device_agents ${PROJECT_SOURCE_DIR}/dist/perfwire-agent-linux-*)
list(FILTER device_agents EXCLUDE REGEX "\\.(sha256|version)$")
# The Python agent's script is data here (what the collector serves and pushes), not a program
# of this package: installed without the executable bit.
set(script_agents ${device_agents})
list(FILTER script_agents INCLUDE REGEX "-python$")
list(FILTER device_agents EXCLUDE REGEX "-python$")
file(GLOB device_agent_sidecars ${PROJECT_SOURCE_DIR}/dist/perfwire-agent-linux-*.sha256
     ${PROJECT_SOURCE_DIR}/dist/perfwire-agent-linux-*.version)
if(device_agents)
    install(PROGRAMS ${device_agents} DESTINATION lib/perfwire/agents)
    install(FILES ${device_agent_sidecars} ${script_agents} DESTINATION lib/perfwire/agents)
endif()

# Debian's changelog (its format, compressed reproducibly) and the man pages.
string(TIMESTAMP changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${package_dir}/changelog
     "perfwire (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
     "  * Built from source with CPack.\n\n"
     " -- ${PERFWIRE_MAINTAINER}  ${changelog_date}\n")
find_program(GZIP gzip REQUIRED)
find_program(HELP2MAN help2man)
set(man_pages)
if(HELP2MAN)
    set(what_perfwire-collector "receive profiles from perfwire agents and serve the perfwire UI")
    set(what_perfwire-agent "profile processes with perf and stream them to a perfwire collector")
    set(what_perfwire-demo "a multi-threaded CPU workload to try perfwire on")
    set(what_perfwire "compare perfwire recordings for a verdict a CI pipeline acts on")
    foreach(prog perfwire-collector perfwire-agent perfwire-demo perfwire)
        add_custom_command(
            OUTPUT ${package_dir}/${prog}.1.gz
            COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION}
                    "--name=${what_${prog}}"
                    --output=${package_dir}/${prog}.1 $<TARGET_FILE:${prog}>
            COMMAND ${GZIP} -9nf ${package_dir}/${prog}.1
            DEPENDS ${prog}
            COMMENT "man page of ${prog}")
        list(APPEND man_pages ${package_dir}/${prog}.1.gz)
    endforeach()
    add_custom_target(man_pages DEPENDS ${man_pages})
    install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()
add_custom_command(OUTPUT ${package_dir}/changelog.gz
                   COMMAND ${GZIP} -9nkf ${package_dir}/changelog
                   DEPENDS ${package_dir}/changelog)
add_custom_target(package_files ALL DEPENDS ${package_dir}/changelog.gz)
if(HELP2MAN)
    add_dependencies(package_files man_pages)
endif()
install(FILES ${package_dir}/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR}
       )

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME perfwire)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "${PERFWIRE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "remote Linux profiler: perf on the device, flame graphs at your desk")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "A small agent on the profiled device drives perf record and perf stat and
streams the compressed text to a collector, which parses it into function
tables, flame graphs, per-thread views and source-line heat maps, keeps
every session on disk and serves a live browser UI. The package holds the
collector, the agent, the systemd units and the static agents for the
devices' architectures.")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# perf for the agent; readelf and addr2line for the collector's symbolizer.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "linux-perf, binutils")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
