"""Sample English paragraphs with their misaki (en-US) phonemes: realistic punctuation and word
lengths for validation and end-to-end checks. Phonemes were produced once with misaki 0.9.4's
``en.G2P`` (spaCy ``en_core_web_sm`` 3.8, espeak-ng fallback) and are kept as data, so no check
depends on the G2P being installed."""

from __future__ import annotations

PARAGRAPHS: tuple[tuple[str, str], ...] = (
    (
        "The old lighthouse stood at the edge of the cliff, its lamp long dark. Every evening, the keeper's daughter climbed the winding stairs anyway, counting each step aloud: one hundred and twelve.",
        "ði ˈOld lˈIthˌWs stˈʊd æt ði ˈɛʤ ʌv ðə klˈɪf, ɪts lˈæmp lˈɔŋ dˈɑɹk. ˈɛvəɹi ˈivnɪŋ, ðə kˈipəɹz dˈɔTəɹ klˈImd ðə wˈIndɪŋ stˈɛɹz ˈɛniwˌA, kˈWntɪŋ ˈiʧ stˈɛp əlˈWd: wˈʌn hˈʌndɹəd ænd twˈɛlv.",
    ),
    (
        "Scientists have discovered that honeybees can recognize human faces, remembering them for days. It's a skill nobody expected from an insect with a brain smaller than a grain of rice!",
        "sˈIəntɪsts hæv dəskˈʌvəɹd ðæt hˈʌnibˌiz kæn ɹˈɛkəɡnˌIz hjˈumən fˈAsᵻz, ɹᵻmˈɛmbəɹɪŋ ðˌɛm fɔɹ dˈAz. ˌɪts ɐ skˈɪl nˈObˌɑdi ɪkspˈɛktᵻd fɹʌm ɐn ˈɪnsˌɛkt wɪð ɐ bɹˈAn smˈɔləɹ ðən ɐ ɡɹˈAn ʌv ɹˈIs!",
    ),
    (
        "Would you like your coffee black, or with a little milk? We also have tea, though I'm afraid the kettle is broken, so it might take a while.",
        "wˌʊd ju lˈIk jʊɹ kˈɔfi blˈæk, ɔɹ wɪð ɐ lˈɪTᵊl mˈɪlk? wˌi ˈɔlsO hæv tˈi, ðˌO ˌIm əfɹˈAd ðə kˈɛTᵊl ɪz bɹˈOkən, sˌO ɪt mˌIt tˈAk ɐ wˌIl.",
    ),
    (
        "Kokoro is an open-weight text to speech model with eighty two million parameters. Despite its lightweight architecture, it delivers comparable quality to larger models, while being significantly faster and more cost efficient. With Apache licensed weights, it can be deployed anywhere, from production environments to personal projects.",
        "kəkˈɔɹO ɪz ɐn ˈOpᵊnwˌAt tˈɛkst tə spˈiʧ mˈɑdᵊl wɪð ˈATi tˈu mˈɪljᵊn pəɹˈæməTəɹz. dəspˈIt ɪts lˈItwˌAt ˈɑɹkətˌɛkʧəɹ, ɪt dəlˈɪvəɹz kˈɑmpəɹəbᵊl kwˈɑləTi tə lˈɑɹʤəɹ mˈɑdᵊlz, wˌIl bˈiɪŋ səɡnˈɪfəkəntli fˈæstəɹ ænd mˈɔɹ kˈɔst əfˈɪʃənt. wˌɪð əpˈæʧi lˈIsᵊnst wˈAts, ɪt kæn bi dəplˈYd ˈɛniwˌɛɹ, fɹʌm pɹədˈʌkʃən ənvˈIɹənmᵊnts tə pˈɜɹsᵊnəl pɹˈɑʤˌɛkts.",
    ),
    (
        "On the morning of the launch, the engineers gathered in the control room, nervous and quiet. The countdown began at ten; at zero, the rocket rose slowly, then faster, until it was only a bright point of light against the blue sky. Someone started to clap, and soon the whole room was cheering.",
        "ˌɔn ðə mˈɔɹnɪŋ ʌv ðə lˈɔnʧ, ði ˌɛnʤənˈɪɹz ɡˈæðəɹd ɪn ðə kəntɹˈOl ɹˈum, nˈɜɹvəs ænd kwˈIət. ðə kˈWntdˌWn bəɡˈæn æt tˈɛn; æt zˈɪɹO, ðə ɹˈɑkət ɹˈOz slˈOli, ðˈɛn fˈæstəɹ, ˌʌntˈɪl ɪt wʌz ˈOnli ɐ bɹˈIt pˈYnt ʌv lˈIt əɡˈɛnst ðə blˈu skˈI. sˈʌmwˌʌn stˈɑɹTᵻd tə klˈæp, ænd sˈun ðə hˈOl ɹˈum wʌz ʧˈɪɹɪŋ.",
    ),
    (
        "Rain fell all night on the small town by the river. By dawn the water had risen over the old stone bridge, and the baker, the teacher and the mayor stood together on the bank, wondering aloud how the children would get to school.",
        "ɹˈAn fˈɛl ˈɔl nˈIt ˌɔn ðə smˈɔl tˈWn bI ðə ɹˈɪvəɹ. bˌI dˈɔn ðə wˈɔTəɹ hæd ɹˈɪzən ˈOvəɹ ði ˈOld stˈOn bɹˈɪʤ, ænd ðə bˈAkəɹ, ðə tˈiʧəɹ ænd ðə mˈAəɹ stˈʊd təɡˈɛðəɹ ˌɔn ðə bˈæŋk, wˈʌndəɹɪŋ əlˈWd hˌW ðə ʧˈɪldɹᵊn wʊd ɡɛt tə skˈul.",
    ),
    (
        "Please remember to turn off the lights when you leave the office. The last person out should also check that the windows are closed, the coffee machine is switched off, and the front door is locked.",
        "plˈiz ɹəmˈɛmbəɹ tə tˈɜɹn ˈɔf ðə lˈIts wˌɛn ju lˈiv ði ˈɔfəs. ðə lˈæst pˈɜɹsᵊn ˈWt ʃˌʊd ˈɔlsO ʧˈɛk ðæt ðə wˈɪndOz ɑɹ klˈOzd, ðə kˈɔfi məʃˈin ɪz swˈɪʧt ˈɔf, ænd ðə fɹˈʌnt dˈɔɹ ɪz lˈɑkt.",
    ),
    (
        "In eighteen sixty nine, a young chemist arranged the known elements by their atomic weights and noticed that their properties repeated at regular intervals. He left gaps in his table for elements nobody had found yet, and predicted what they would be like. Within twenty years, three of them were discovered, exactly as he had described.",
        "ɪn ˌAtˈin sˈɪksti nˈIn, ɐ jˈʌŋ kˈɛmɪst əɹˈAnʤd ðə nˈOn ˈɛləmənts bI ðɛɹ ətˈɑmɪk wˈAts ænd nˈOTəst ðæt ðɛɹ pɹˈɑpəɹTiz ɹəpˈiTᵻd æt ɹˈɛɡjələɹ ˈɪntəɹvᵊlz. hˌi lˈɛft ɡˈæps ɪn hɪz tˈAbᵊl fɔɹ ˈɛləmənts nˈObˌɑdi hæd fˈWnd jˈɛt, ænd pɹidˈɪktᵻd wˌʌt ðA wʊd bi lˈIk. wɪðˈɪn twˈɛnti jˈɪɹz, θɹˈi ʌv ðˌɛm wɜɹ dəskˈʌvəɹd, ɪɡzˈæktli æz hi hæd dəskɹˈIbd.",
    ),
)


def phonemes(n: int, start: int = 0) -> str:
    """About ``n`` phonemes of running text (paragraphs joined, from ``start``), ending at a word
    boundary when possible."""
    text = ""
    i = start
    while len(text) < n:
        text = (text + " " + PARAGRAPHS[i % len(PARAGRAPHS)][1]).strip()
        i += 1
    cut = text[:n]
    if n < len(text) and text[n] != " " and " " in cut[n // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.strip()
